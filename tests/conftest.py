from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never touch the user's real rocmpatch cache or pick up their upstream override."""
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path_factory.mktemp("rocmpatch-cache")))
    monkeypatch.delenv("ROCMPATCH_UPSTREAM_URL", raising=False)


@pytest.fixture(scope="session")
def upstream_mirror() -> Path:
    """A git mirror of NVIDIA/Megatron-LM named by ROCMPATCH_TEST_UPSTREAM; skips without it."""
    value = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not value:
        pytest.skip("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM to run full-tree tests")
    return Path(value.removeprefix("file://"))


@pytest.fixture
def upstream(tmp_path):
    """A small real upstream repository with history, a tag (the pin) and a symlink."""
    from tests.fixtures import make_upstream

    return make_upstream(tmp_path)


@pytest.fixture
def project(tmp_path, upstream):
    """A series of two patches against `upstream` with its lock (tmp/proj/patchsets, tmp/proj/upstream.lock)."""
    from tests.fixtures import make_series

    return make_series(tmp_path / "proj", upstream)


@pytest.fixture
def cli(project):
    """Run the rocmpatch CLI in-process against `project`'s series; returns the Click result."""
    from click.testing import CliRunner

    from rocmpatch.cli import app

    def invoke(*args: str, series_dir=None):
        extra = ["--series-dir", str(series_dir or project.series_dir)] if args and args[0] != "--version" else []
        return CliRunner().invoke(app, [*args, *extra])

    return invoke


@pytest.fixture
def checkout(cli, tmp_path):
    """`rocmpatch apply` of `project`'s series into tmp/Megatron-LM."""
    target = tmp_path / "Megatron-LM"
    assert cli("apply", "--target", str(target)).exit_code == 0
    return target
