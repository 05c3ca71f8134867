from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.megatron_wheel import megatron_core_files


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never touch the user's real rocmpatch cache or pick up their upstream override."""
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path_factory.mktemp("rocmpatch-cache")))
    monkeypatch.delenv("ROCMPATCH_UPSTREAM_URL", raising=False)


@pytest.fixture(scope="session")
def wheel_core_files() -> dict[str, bytes]:
    """megatron/core/** of the pin, from the megatron-core 0.5.0 wheel."""
    return megatron_core_files()


@pytest.fixture(scope="session")
def upstream_mirror() -> Path:
    """A git mirror of NVIDIA/Megatron-LM named by ROCMPATCH_TEST_UPSTREAM; skips without it."""
    value = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not value:
        pytest.skip("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM to run full-tree tests")
    return Path(value.removeprefix("file://"))
