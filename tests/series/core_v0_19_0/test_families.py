"""core_v0.19.0, model families beyond Llama on the CPU path: Qwen3-MoE and Mixtral shapes with
expert parallelism over the alltoall dispatcher (cpu-moe-alltoall).

CI checks run the patched megatron/ of the megatron-core wheel (conftest.tree019) in child
processes (families_checks.py). The full-tree tests run upstream's own pretrain_gpt.py with its
default fusion flags, bf16, on two CPU processes over gloo (test_training.pretrain_gpt: the tiny
Llama block plus the lines below) and need a Megatron-LM mirror (ROCMPATCH_TEST_UPSTREAM).
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.series.core_v0_19_0 import harness
from tests.series.core_v0_19_0.test_training import assert_learns, pretrain_gpt
from tests.series.core_v0_19_0.test_training import tree019 as full_tree019  # noqa: F401 (a fixture)

pytest.importorskip("torch")

ITERS = 10
EXPERT_PARALLEL_2 = ["--moe-token-dispatcher-type", "alltoall", "--expert-model-parallel-size", "2"]
# Qwen3-30B-A3B's shape, tiny: GQA with QK layer norm and head size apart from hidden / heads, every
# layer MoE, top-2 of 8 experts (softmax router, aux loss), no shared expert.
QWEN3_MOE = [
    "--kv-channels", "32", "--qk-layernorm", "--rotary-base", "1000000",
    "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
    "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-3", "--moe-router-dtype", "fp32",
    *EXPERT_PARALLEL_2,
]
# Mixtral's shape, tiny: every layer MoE, top-2 of 4 SwiGLU experts as large as the dense FFN.
MIXTRAL = [
    "--rotary-base", "1000000", "--num-experts", "4", "--moe-router-topk", "2",
    "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-router-dtype", "fp32",
    *EXPERT_PARALLEL_2,
]


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def two_ranks(group: str, tree, tmp_path_factory) -> list[dict]:
    """Run one group of families_checks.py as both ranks of a two-process gloo job."""
    port = free_port()
    workdirs = [tmp_path_factory.mktemp(f"{group}-rank{rank}") for rank in range(2)]
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(harness.run_child, "families_checks", group, tree, workdirs[rank], timeout=300,
                            env={"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
                for rank in range(2)]
        return [run.result()[group] for run in runs]


# ---------------------------------------------------------------- CI: the patched wheel tree


def test_alltoall_dispatcher_over_two_expert_parallel_ranks(tree019, tmp_path_factory):
    """Each rank routes 6 tokens to 2 of 4 experts (2 per rank); the dispatcher sends them across
    the ranks and back. Before cpu-moe-alltoall took host split sizes this was a TypeError."""
    results = two_ranks("alltoall_ep2", tree019, tmp_path_factory)
    for result in results:
        assert result["error"] is None, result
        assert result["max_err"] < 1e-6, result  # identity experts, probabilities summing to 1
    # 2 ranks x 6 tokens x top-2 = 24 token copies, each received by the rank of its expert.
    assert sum(sum(r["tokens_per_expert"]) for r in results) == 24, results


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.mark.upstream
def test_qwen3_moe_with_expert_parallel_trains(full_tree019):  # noqa: F811 (the fixture imported above)
    losses, output = pretrain_gpt(full_tree019, *QWEN3_MOE, iters=ITERS)
    assert_learns(losses, ITERS)
    assert "load_balancing_loss:" in output


@pytest.mark.upstream
def test_mixtral_with_expert_parallel_and_grouped_gemm_trains(full_tree019):  # noqa: F811
    """--moe-grouped-gemm without Transformer Engine runs the sequential experts, saying so once."""
    losses, output = pretrain_gpt(full_tree019, *MIXTRAL, "--moe-grouped-gemm", iters=ITERS)
    assert_learns(losses, ITERS)
    assert output.count("WARNING: --moe-grouped-gemm needs") == 1, output[-4000:]
