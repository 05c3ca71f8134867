"""The series tests' trees (tests/series/trees.py), built once per session."""

import pytest

from tests.megatron_wheel import megatron_core_files
from tests.series.core_v0_5_0.trees import RELEASE, patched_core, patched_full, pristine_core, pristine_full  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def wheel_core_files() -> dict[str, bytes]:
    """megatron/core/** of the pin, from the release's test wheel (release.yaml `wheel:`)."""
    return megatron_core_files(RELEASE)
