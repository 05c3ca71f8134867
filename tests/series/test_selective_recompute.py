"""selective-recompute: without Transformer Engine, the selective recompute built on upstream's
CheckpointWithoutOutput (--recompute-modules layernorm: each layer's input and pre-MLP norms) trains
and logs the losses of the run without it (patch checkpoint-without-output-no-te; before it, the
first forward died with "NameError: name 'FP8GlobalStateManager' is not defined"). moe_act, the
other such module, needs --moe-grouped-gemm: test_grouped_gemm.py tests it with the torch experts
(moe-grouped-gemm-local).

Full tree only (ROCMPATCH_TEST_UPSTREAM; nothing runs in CI): pretrain_gpt.py on two CPU processes
over gloo, the tiny Llama in fp32 with an MoE second layer, with and without the recompute; and the
series without the patch, which stops naming the error.
"""

from __future__ import annotations

import pytest

from testkit import harness
from testkit.flags import FP32_LLAMA, MOE_LAYER

pytest.importorskip("torch")
pytestmark = [harness.releases_with("selective-recompute"), pytest.mark.upstream]

PATCH = "checkpoint-without-output-no-te"
ITERS = 4
RECOMPUTE = ["--recompute-granularity", "selective", "--recompute-modules", "layernorm"]
TINY_MOE = [*FP32_LLAMA, "--train-iters", str(ITERS), *MOE_LAYER]


def test_layernorm_recompute_logs_the_losses_of_the_run_without_it(training_tree):
    straight = harness.trains(training_tree, TINY_MOE)
    recomputed = harness.trains(training_tree, [*TINY_MOE, *RECOMPUTE])
    assert sorted(straight.losses) == list(range(1, ITERS + 1)), straight.tail()
    # The recompute runs the same torch ops on the same inputs and RNG states: equal, not just close.
    assert recomputed.losses == straight.losses, (straight.losses, recomputed.losses)


def test_without_the_patch_the_first_forward_dies_naming_fp8_global_state_manager(release, trees, upstream_mirror):
    harness.needs_training_tools()
    tree = trees.full(release, upstream_mirror, release.patches(without=(PATCH,)))
    run = harness.pretrain(tree, [*TINY_MOE, *RECOMPUTE])
    assert run.returncode != 0 and not run.logged, run.tail(3000)
    assert "NameError: name 'FP8GlobalStateManager' is not defined" in run.output, run.tail(3000)
