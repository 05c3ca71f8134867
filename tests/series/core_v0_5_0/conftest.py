"""The series tests' trees (tests/series/trees.py), built once per session."""

from tests.series.core_v0_5_0.trees import patched_core, patched_full, pristine_core, pristine_full  # noqa: F401 (fixtures)
