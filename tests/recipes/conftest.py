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
