"""core_v0.19.0, model families beyond Llama on the CPU path: DeepSeek-V3 (multi-latent attention
with YaRN RoPE, shared expert, sigmoid router with expert bias, multi-token prediction), Qwen3-MoE
and Mixtral shapes with expert parallelism over the alltoall dispatcher. Patches: mla-local-attention,
mla-local-no-q-lora, mla-sdpa-value-pad, fusions-optional (the MLA RoPE kernel), cpu-moe (the alltoall
dispatcher), cpu-rope (YaRN), cpu-transformer (the MTP loss tracker).

CI checks run the patched megatron/ of the megatron-core wheel (conftest.tree019) in child
processes (families_checks.py). The full-tree tests run upstream's own pretrain_gpt.py with its
default fusion flags, bf16, on two CPU processes over gloo (test_training.pretrain_gpt: the tiny
Llama block plus the lines below) and need a Megatron-LM mirror (ROCMPATCH_TEST_UPSTREAM).
"""

from __future__ import annotations

import re
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.series.core_v0_19_0 import harness
from tests.series.core_v0_19_0.test_training import TINY_LLAMA, assert_learns, pretrain_gpt
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
# DeepSeek-V3's shape, tiny: MLA (q/kv LoRA ranks, decoupled RoPE head dims, YaRN scaling, the
# latent norms), a dense first layer then MoE with a shared expert, a sigmoid router with expert bias
# and the sequence aux loss, node-limited (group) routing, one MTP layer. MLA has no query groups.
_GQA = TINY_LLAMA.index("--group-query-attention")
assert TINY_LLAMA[_GQA:_GQA + 3] == ["--group-query-attention", "--num-query-groups", "2"]
DEEPSEEK_BASE = TINY_LLAMA[:_GQA] + TINY_LLAMA[_GQA + 3:]
DEEPSEEK_V3 = [
    "--multi-latent-attention", "--q-lora-rank", "32", "--kv-lora-rank", "16", "--qk-head-dim", "16",
    "--qk-pos-emb-head-dim", "8", "--v-head-dim", "16", "--rotary-scaling-factor", "40", "--mscale", "1.0",
    "--mscale-all-dim", "1.0", "--qk-layernorm",
    "--num-experts", "4", "--moe-layer-freq", "[0,1]", "--moe-ffn-hidden-size", "32",
    "--moe-shared-expert-intermediate-size", "32", "--moe-router-topk", "2", "--moe-router-num-groups", "2",
    "--moe-router-group-topk", "1", "--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
    "--moe-router-bias-update-rate", "1e-3", "--moe-router-topk-scaling-factor", "2.5",
    "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-4", "--moe-router-dtype", "fp32",
    *EXPERT_PARALLEL_2,
    "--mtp-num-layers", "1", "--mtp-loss-scaling-factor", "0.1",
]
# What the log line says about the auxiliary losses: {iteration: (seq aux loss, MTP loss)}.
AUX_LOSSES = re.compile(r"iteration\s+(\d+)/.*?seq_load_balancing_loss: ([0-9.E+-]+) \|.*?mtp_1 loss: ([0-9.E+-]+) \|")
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
    the ranks and back. Before cpu-moe took host split sizes this was a TypeError."""
    results = two_ranks("alltoall_ep2", tree019, tmp_path_factory)
    for result in results:
        assert result["error"] is None, result
        assert result["max_err"] < 1e-6, result  # identity experts, probabilities summing to 1
    # 2 ranks x 6 tokens x top-2 = 24 token copies, each received by the rank of its expert.
    assert sum(sum(r["tokens_per_expert"]) for r in results) == 24, results


@pytest.fixture(scope="session")
def mla_and_mtp(tree019, child_dir) -> dict:
    return harness.run_child("families_checks", "mla,mtp", tree019, child_dir)


def test_mla_rope_fusion_turned_off_without_triton(mla_and_mtp):
    """The MLA RoPE kernel is triton's: without triton (or a GPU) validate_args turns it off in
    one line, instead of the first forward failing inside the kernel launch."""
    result = mla_and_mtp["mla"]
    assert result["apply_rope_fusion"] is False
    [line] = [line for line in result["warnings"] if "--no-rope-fusion" in line]
    assert "triton" in line and "turning apply_rope_fusion off" in line


def test_mla_attention_with_yarn_rope_runs_on_cpu(mla_and_mtp):
    result = mla_and_mtp["mla"]
    assert result["rope_type"] == "yarn"
    mla = result["mla"]
    assert mla["error"] is None, mla
    assert mla["core"] == "DotProductAttention" and mla["rotary"] == "YarnRotaryEmbedding"
    assert mla["shape"] == [32, 2, 64] and mla["finite"]


def test_mla_without_query_latent_builds_with_qk_layernorm(mla_and_mtp):
    """DeepSeek-V2-Lite's attention on the local implementation: no query latent, so no Q norm and a
    plain query projection; the key-value latent keeps its norm. Before mla-local-no-q-lora this
    was a ValueError at model construction."""
    result = mla_and_mtp["mla"]["mla_without_q_lora"]
    assert result["error"] is None, result
    assert result["q_proj"] == "ColumnParallelLinear" and result["kv_norm"] == "RMSNorm"  # torch.nn.RMSNorm
    assert result["q_norm"] in ("IdentityOp", "NoneType") and result["shape"] == [32, 2, 64] and result["finite"]


def test_local_attention_takes_query_key_and_value_head_sizes(mla_and_mtp):
    """Heads of 24 for query/key and 16 for values, through SDPA (its flash kernel alone too) and the
    explicit path, equal plain softmax attention; without k_channels/v_channels both are
    kv_channels, as before."""
    result = mla_and_mtp["mla"]
    paths = result["dot_product_attention"]
    assert paths["auto"]["sdpa"] and not paths["unfused"]["sdpa"]
    assert paths["flash"].get("sdpa"), paths["flash"]  # the flash kernel alone: values padded (mla-sdpa-value-pad)
    for path in paths.values():
        assert path["shape"] == [32, 2, 64] and path["max_err"] < 1e-5, paths
    assert result["default_heads"] == [result["kv_channels"], 4 * result["kv_channels"]]


def test_mtp_loss_tracker_on_cpu(mla_and_mtp):
    assert mla_and_mtp["mtp"] == {"error": None, "device": "cpu", "loss_values": [2.5]}


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.mark.upstream
def test_deepseek_v3_trains_and_resumes_with_distributed_optimizer(full_tree019, tmp_path):  # noqa: F811
    """10 iterations, saving at 5; a run resumed from 5 logs the straight run's losses, the MTP
    loss and the sequence aux loss included (expert bias and MTP layer come back from the checkpoint)."""
    ckpt = tmp_path / "ckpt"
    extra = [*DEEPSEEK_V3, "--use-distributed-optimizer"]
    straight, output = pretrain_gpt(full_tree019, *extra, "--save", str(ckpt), "--save-interval", "5",
                                    iters=ITERS, base=DEEPSEEK_BASE)
    assert_learns(straight, ITERS)
    straight_aux = {int(m[1]): (m[2], m[3]) for m in AUX_LOSSES.finditer(output)}
    assert sorted(straight_aux) == list(range(1, ITERS + 1)), output[-4000:]
    (ckpt / "latest_checkpointed_iteration.txt").write_text("5")
    resumed, output = pretrain_gpt(full_tree019, *extra, "--load", str(ckpt), iters=ITERS, base=DEEPSEEK_BASE)
    assert re.search(r"successfully loaded checkpoint from .* at iteration 5\b", output), output[-3000:]
    assert resumed == {i: straight[i] for i in range(6, ITERS + 1)}, (straight, resumed)
    resumed_aux = {int(m[1]): (m[2], m[3]) for m in AUX_LOSSES.finditer(output)}
    assert resumed_aux == {i: straight_aux[i] for i in range(6, ITERS + 1)}




@pytest.mark.upstream
def test_qwen3_moe_with_expert_parallel_trains(full_tree019):  # noqa: F811 (the fixture imported above)
    losses, output = pretrain_gpt(full_tree019, *QWEN3_MOE, iters=ITERS)
    assert_learns(losses, ITERS)
    assert "load_balancing_loss:" in output


@pytest.mark.upstream
def test_mixtral_with_expert_parallel_and_grouped_gemm_trains(full_tree019):  # noqa: F811
    """--moe-grouped-gemm without Transformer Engine runs torch's grouped GEMM, saying so once per process."""
    losses, output = pretrain_gpt(full_tree019, *MIXTRAL, "--moe-grouped-gemm", iters=ITERS)
    assert_learns(losses, ITERS)
    assert output.count("one torch.nn.functional.grouped_mm per linear layer") == 2, output[-4000:]
