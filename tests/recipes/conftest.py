from __future__ import annotations

import pytest

from rocmpatch import launchers


@pytest.fixture(autouse=True)
def gpus_here(monkeypatch):
    """The GPUs torch sees on "this machine", for `recipe launch` (its --device auto, its checks):
    8 unless a test says otherwise (gpus_here(0): a machine without GPUs), whatever runs the tests."""
    def see(count: int | None) -> None:
        monkeypatch.setattr(launchers, "visible_gpus", lambda: count)

    see(8)
    return see


@pytest.fixture(autouse=True)
def no_device_connections(monkeypatch):
    """A GPU launch sets CUDA_DEVICE_MAX_CONNECTIONS=1 unless the user's environment has it: the
    printed lines must not depend on the shell that runs the tests."""
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
