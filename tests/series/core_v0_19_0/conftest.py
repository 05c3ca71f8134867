"""Session fixtures of the core_v0.19.0 series tests: each tree is built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.series.core_v0_19_0 import harness


@pytest.fixture(scope="session")
def series019() -> list:
    """Every patch of patchsets/core_v0.19.0, parsed, in series order."""
    return harness.series_through()


@pytest.fixture(scope="session")
def tree019(series019, tmp_path_factory) -> Path:
    """megatron/ (core + training) of the pin from the wheel, with the whole series applied."""
    return harness.wheel_tree(tmp_path_factory.mktemp("tree019"), series019)


@pytest.fixture(scope="session")
def pristine019(tmp_path_factory) -> Path:
    """megatron/ (core + training) of the pin from the wheel, as released."""
    return harness.wheel_tree(tmp_path_factory.mktemp("pristine019"), [])


@pytest.fixture(scope="session")
def full019(series019, upstream_mirror, tmp_path_factory) -> Path:
    """The whole pinned tree from the mirror (ROCMPATCH_TEST_UPSTREAM) with the whole series applied."""
    return harness.full_tree(upstream_mirror, tmp_path_factory.mktemp("full019"), series019)


@pytest.fixture(scope="session")
def child_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("child019")
