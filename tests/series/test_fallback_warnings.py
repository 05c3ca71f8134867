"""fallback-warnings: on the release's bytes (the megatron-core wheel), without Transformer Engine and
apex, each fallback warning is one line, once per process; other warnings are untouched (patch
fallback-warnings)."""

from __future__ import annotations

import pytest

from tests.series import harness

pytest.importorskip("torch")  # the child imports megatron.core, which needs PyTorch
pytestmark = harness.releases_with("fallback-warnings")

PATCH = "fallback-warnings"
TORCH_NORM = "UserWarning: Apex is not installed. Falling back to Torch Norm"


def imports(tree, workdir) -> dict:
    return harness.run_checks("checks.fallback_warnings", "all", tree, workdir)


def test_each_fallback_is_one_line_once(release, trees, patched_wheel, child_dir):
    # Before: the series up to the patch, without it (the pristine pin does not import without triton).
    tree = trees.wheel(release, release.patches(through=PATCH, without=(PATCH,)))
    before = imports(tree, child_dir)["stderr"].splitlines()
    result = imports(patched_wheel, child_dir)
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
