"""moe-ep: MoE with expert parallelism over the alltoall dispatcher on the CPU path (patch cpu-moe:
host split sizes for the alltoall).

CI: testkit/checks/families.py's alltoall_ep2 group as both ranks of a two-process gloo job on the patched
wheel tree. Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's own pretrain_gpt.py with its default
fusion flags, bf16, two CPU processes over gloo, Qwen3-MoE and Mixtral shapes with EP 2.
"""

from __future__ import annotations

import pytest

from testkit import harness
from testkit.flags import MIXTRAL, QWEN3_MOE

pytest.importorskip("torch")
pytestmark = harness.releases_with("moe-ep")

ITERS = 10


def test_alltoall_dispatcher_over_two_expert_parallel_ranks(patched_wheel, tmp_path_factory):
    """Each rank routes 6 tokens to 2 of 4 experts (2 per rank); the dispatcher sends them across
    the ranks and back. Before cpu-moe took host split sizes this was a TypeError."""
    workdirs = [tmp_path_factory.mktemp(f"alltoall_ep2-rank{rank}") for rank in range(2)]
    results = [r["alltoall_ep2"] for r in harness.run_ranks("checks.families", "alltoall_ep2", patched_wheel, workdirs,
                                                            timeout=300)]
    for result in results:
        assert result["error"] is None, result
        assert result["max_err"] < 1e-6, result  # identity experts, probabilities summing to 1
    # 2 ranks x 6 tokens x top-2 = 24 token copies, each received by the rank of its expert.
    assert sum(sum(r["tokens_per_expert"]) for r in results) == 24, results


@pytest.mark.upstream
def test_qwen3_moe_with_expert_parallel_trains(training_tree):
    run = harness.trains_on_cpu(training_tree, *QWEN3_MOE, iters=ITERS)
    harness.assert_learns(run.losses, ITERS)
    assert "load_balancing_loss:" in run.output


@pytest.mark.upstream
def test_mixtral_with_expert_parallel_and_grouped_gemm_trains(release, training_tree):
    """--moe-grouped-gemm without Transformer Engine runs torch's grouped GEMM, saying so once per
    process, where the release declares grouped-gemm; elsewhere the sequential experts, saying so once."""
    run = harness.trains_on_cpu(training_tree, *MIXTRAL, "--moe-grouped-gemm", iters=ITERS)
    harness.assert_learns(run.losses, ITERS)
    if "grouped-gemm" in release.features:
        assert run.output.count("one torch.nn.functional.grouped_mm per linear layer") == 2, run.tail()
    else:
        assert run.output.count("WARNING: --moe-grouped-gemm needs") == 1, run.tail()
