"""A rough memory estimate per GPU from Megatron arguments alone (no Megatron import).

Weights and gradients: 2 bytes (bf16) + 4 bytes (fp32 gradient buffer) per parameter held by the GPU.
Adam with fp32 master weights: 12 bytes per parameter, divided over the data-parallel ranks with
--use-distributed-optimizer (expert parameters over the expert-data-parallel ranks).
Activations, per layer and micro-batch, with sequence parallelism when TP > 1 and SDPA attention (no
stored score matrix): s*b*h*(18 + 4f/h) bytes with a GELU MLP, 6f/h with SwiGLU (two projections),
the MLP part times top-k for MoE layers. Full recompute keeps only each layer's input (2 s*b*h bytes)
plus one layer's activations. The first pipeline stage holds min(PP, micro-batches) micro-batches of
its L/PP layers. Logits (bf16 and their fp32 copy for the loss) are added when PP = 1.
Not counted: runtime, RCCL/NCCL buffers, allocator fragmentation (plan a few GiB per GPU for those).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Estimate:
    params_total: float
    params_per_gpu: float
    weights_and_grads_gib: float
    optimizer_gib: float
    activations_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_and_grads_gib + self.optimizer_gib + self.activations_gib

    def to_json(self) -> dict:
        return {"params_total_billion": round(self.params_total / 1e9, 2), "params_per_gpu_billion": round(self.params_per_gpu / 1e9, 2),
                "weights_and_grads_gib": round(self.weights_and_grads_gib, 1), "optimizer_gib": round(self.optimizer_gib, 1),
                "activations_gib": round(self.activations_gib, 1), "total_gib": round(self.total_gib, 1)}


def _int(args: dict, flag: str, default: int = 0) -> int:
    value = args.get(flag, default)
    return int(value) if value not in (None, False) else default


def estimate(args: dict, vocab_size: int, world_size: int) -> Estimate:
    L, h = _int(args, "--num-layers"), _int(args, "--hidden-size")
    f = _int(args, "--ffn-hidden-size", 4 * h)
    heads = _int(args, "--num-attention-heads")
    groups = _int(args, "--num-query-groups", heads) if args.get("--group-query-attention") else heads
    s, b = _int(args, "--seq-length"), _int(args, "--micro-batch-size", 1)
    gbs = _int(args, "--global-batch-size", b)
    tp, pp = _int(args, "--tensor-model-parallel-size", 1), _int(args, "--pipeline-model-parallel-size", 1)
    ep = _int(args, "--expert-model-parallel-size", 1)
    experts, topk = _int(args, "--num-experts"), _int(args, "--moe-router-topk", 2)
    swiglu = bool(args.get("--swiglu"))
    untied = bool(args.get("--untie-embeddings-and-output-weights"))
    distributed = bool(args.get("--use-distributed-optimizer"))

    attention = h * (h + 2 * groups * (h // heads)) + h * h
    expert = (3 if swiglu else 2) * h * f
    dense_mlp = 0 if experts else expert
    expert_total = experts * expert
    norms = 2 * h
    embedding = vocab_size * h
    params_total = L * (attention + dense_mlp + expert_total + norms + (h * experts)) + embedding * (2 if untied else 1) + h

    stage_layers = L / pp
    dense_per_gpu = stage_layers * ((attention + dense_mlp) / tp + norms + h * experts) + embedding / tp
    if untied and pp == 1:
        dense_per_gpu += embedding / tp
    expert_per_gpu = stage_layers * (experts / ep) * expert / tp if experts else 0.0
    dp = world_size // (tp * pp)
    expert_dp = max(1, world_size // (ep * tp * pp))
    weights = 6 * (dense_per_gpu + expert_per_gpu)
    optimizer = 12 * (dense_per_gpu / dp + expert_per_gpu / expert_dp) if distributed else 12 * (dense_per_gpu + expert_per_gpu)

    mlp_term = (6 if swiglu else 4) * f / h * (topk if experts else 1)
    per_layer = s * b * h * (18 + mlp_term) / tp
    microbatches = max(1, gbs // (b * dp))
    in_flight = min(pp, microbatches)
    if args.get("--recompute-granularity") == "full":
        activations = stage_layers * in_flight * 2 * s * b * h / tp + per_layer
    else:
        activations = stage_layers * in_flight * per_layer
    if pp == 1:
        activations += s * b * vocab_size * (2 + 4) / tp
    return Estimate(params_total, dense_per_gpu + expert_per_gpu, weights / GIB, optimizer / GIB, activations / GIB)
