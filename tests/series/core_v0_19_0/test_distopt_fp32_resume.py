"""distopt-fp32-load (core_v0.19.0's patch): an fp32 run with --use-distributed-optimizer resumes.
Full tree only (ROCMPATCH_TEST_UPSTREAM): pretrain_gpt.py, the tiny Llama in fp32 on two gloo processes."""

from __future__ import annotations

import re

import pytest

from testkit import harness
from testkit.flags import FP32_LLAMA

pytest.importorskip("torch")


@pytest.mark.upstream
def test_fp32_distributed_optimizer_run_resumes_as_the_straight_run(training_tree, tmp_path):
    """Without the patch the load stops at "a view of a leaf Variable that requires grad is being used
    in an in-place operation" (fp32: the optimizer's main parameters are the model's own)."""
    ckpt, extra = tmp_path / "ckpt", ("--use-distributed-optimizer",)
    straight = harness.trains_on_cpu(training_tree, "--save", str(ckpt), "--save-interval", "4", *extra,
                                     base=FP32_LLAMA)
    harness.assert_learns(straight.losses, 8)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    resumed = harness.trains_on_cpu(training_tree, "--load", str(ckpt), *extra, base=FP32_LLAMA)
    assert re.search(r"successfully loaded checkpoint from .* at iteration 4\b", resumed.output), resumed.tail(3000)
    assert resumed.losses == {i: straight.losses[i] for i in (5, 6, 7, 8)}, (straight.losses, resumed.losses)
