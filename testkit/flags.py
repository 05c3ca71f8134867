"""Megatron command lines the CPU training tests share (pretrain_gpt.py flags, for every release
whose release.yaml declares the feature a test checks)."""

from __future__ import annotations

# Upstream's default flags plus a Llama-style block; the smoke train stage runs the same lines.
TINY_LLAMA = [
    "--distributed-backend", "gloo",
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--ffn-hidden-size", "128", "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "2", "--global-batch-size", "8",
    "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2",
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
    "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000", "--seed", "1234",
    "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
    "--group-query-attention", "--num-query-groups", "2",
    "--untie-embeddings-and-output-weights", "--bf16", "--disable-bias-linear",
]
# The tiny Llama in fp32 (TINY_LLAMA without --bf16).
FP32_LLAMA = [flag for flag in TINY_LLAMA if flag != "--bf16"]


def without(flags: list[str], *names: str, values: bool = True) -> list[str]:
    """`flags` less each of `names` (and the value after it, where `values`)."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag in names:
            skip = values
        else:
            kept.append(flag)
    return kept


# Layer 1 dense, layer 2 MoE (4 experts, top 2): each parallel layout runs both kinds of MLP.
MOE_LAYER = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-layer-freq", "[0,1]"]
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
DEEPSEEK_BASE = without(without(TINY_LLAMA, "--num-query-groups"), "--group-query-attention", values=False)
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
# Mixtral's shape, tiny: every layer MoE, top-2 of 4 SwiGLU experts as large as the dense FFN.
MIXTRAL = [
    "--rotary-base", "1000000", "--num-experts", "4", "--moe-router-topk", "2",
    "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-router-dtype", "fp32",
    *EXPERT_PARALLEL_2,
]

# A tiny GPT of the legacy megatron/model (the releases that declare legacy-model) on --mock-data:
# NullTokenizer needs no vocabulary file; --distributed-backend gloo asks for the CPU run. Dropout is
# Megatron's default 0.1.
TINY_GPT = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "4", "--global-batch-size", "4",
    "--train-iters", "10", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine",
    "--lr-warmup-iters", "2", "--weight-decay", "0.01", "--clip-grad", "1.0",
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128",
    "--distributed-backend", "gloo", "--no-gradient-accumulation-fusion",
    "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "1", "--split", "949,50,1",
]
# Llama-style flags of the legacy model (query groups, SwiGLU, RMSNorm, RoPE).
LEGACY_LLAMA = ["--group-query-attention", "--num-query-groups", "2", "--swiglu", "--normalization", "RMSNorm",
                "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear"]
