"""0025 fallback-warnings on the release's bytes (the megatron-core wheel): without Transformer Engine
and apex, each fallback warning is one line, once per process; other warnings are untouched."""

from __future__ import annotations

import pytest

from tests.series.core_v0_19_0 import harness

pytest.importorskip("torch")  # the child imports megatron.core, which needs PyTorch

TORCH_NORM = "UserWarning: Apex is not installed. Falling back to Torch Norm"


def imports(tree, workdir) -> dict:
    return harness.run_child("fallback_checks", "all", tree, workdir)


def test_each_fallback_is_one_line_once(tree019, child_dir, tmp_path):
    # Before: the series up to the patch before this one (the pristine pin does not import without triton).
    without = harness.wheel_tree(tmp_path / "before", harness.series_through("te-spec-clear-error"))
    before = imports(without, child_dir)["stderr"].splitlines()
    result = imports(tree019, child_dir)
    assert result["imported"]["megatron.core.models.gpt.gpt_layer_specs"] is None, result["imported"]
    after = result["stderr"].splitlines()
    assert sum(TORCH_NORM in line for line in before) >= 2  # upstream: once per module that falls back
    assert sum(TORCH_NORM in line for line in after) == 1
    for number, line in enumerate(after):
        if "Falling back" in line or "is not installed" in line:
            assert number + 1 == len(after) or not after[number + 1].strip().startswith("warnings.warn("), after
    assert not any("your version is 0.0.0" in line for line in after)
    ordinary = next(n for n, line in enumerate(after) if "an ordinary warning keeps its source line" in line)
    assert after[ordinary + 1].strip().startswith("warnings.warn(")  # every other warning as before
