"""Part 2 of the series on the wheel's real megatron/core bytes, on CPU: layer norm and RMSNorm,
the gradient-accumulation fallback, RoPE, trusted checkpoint loading, and a megatron-core GPT
(local spec, RoPE, SwiGLU, RMSNorm) training a few steps with gloo at world size 1."""

from __future__ import annotations

import pytest

from tests.series.part2_helpers import patched_core_tree, run_checks

pytest.importorskip("torch")

CHECKS = (
    "layer_norm",
    "rms_norm",
    "grad_accumulation_fallback",
    "rope",
    "checkpoint_round_trip",
    "gpt_trains_on_cpu",
)


@pytest.fixture(scope="session")
def core_results(wheel_core_files, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("part2-core")
    tree = patched_core_tree(wheel_core_files, tmp / "tree")
    return run_checks(tree, "core", tmp)


def test_part2_core_runs_every_check(core_results):
    assert sorted(core_results) == sorted(CHECKS)


@pytest.mark.parametrize("name", CHECKS)
def test_part2_core(core_results, name):
    result = core_results[name]
    assert result["ok"], result["detail"]
