"""Memory per GPU of a Megatron-LM training run on the torch path: upstream's own model of the
release, plus what the torch path (no Transformer Engine, apex or flash-attn) adds.

Upstream's model is megatron/training/theoretical_memory_usage.py of the release (the authority for
its parameter counts and bytes per parameter), read from the target tree, or from the pinned commit
in rocmpatch's cache: weights, gradients and Adam states per GPU (compute_weight_and_optimizer_memory:
bf16 weights, fp32 gradients, fp32 main weights and Adam moments, sharded over data-parallel ranks
with the distributed optimizer). Its activation formulas describe Transformer Engine's kernels; they
are reported next to the torch path's own count, which replaces them:

- per layer and token (bytes; divided by TP, sequence parallelism assumed with TP > 1): each norm's
  input (2h; torch's composite CPU rms_norm keeps fp32 copies: about 5h more, measured), the QKV
  projection's input (2h) and output (2(h + 2kv): the value heads SDPA keeps are a view of it), the
  rotated q and k (2(h + kv)), SDPA's output (2h) and log-sum-exp (4 per head), the output
  projection's input (2h), the MLP's input (2h), its fc1 output (4f gated: all the fused
  bias-SwiGLU keeps; 8f unfused) and fc2 input (2f). The explicit attention path
  (--attention-backend unfused) adds upstream's 5 x heads x s for scores, probabilities and mask.
  MoE layers: the MLP part times top-k, plus the permuted tokens (4h x top-k), the router's fp32
  logits and probabilities (8 per expert) and a shared expert's MLP; --moe-layer-freq says which
  layers are MoE. Multi-latent attention (MLA) replaces the attention part: the down projections'
  input (2h), the latent outputs and their norms' outputs (2(q_lora + kv_lora + rope dim) and again
  for the norms), the concatenated query and key (2 x 2n(qk + rope)), the values SDPA keeps, padded
  to the query/key head size for its flash kernels (series patch 0056: 2n(qk + rope)), SDPA's output
  (2nv) and log-sum-exp, the output projection's input (2nv);
- the loss (last stage): the final norm and output-layer inputs and, at the start of the backward
  pass, the fp32 softmax, its fp32 gradient and the bf16 gradient (10 bytes per vocabulary entry
  with the native cross-entropy fusion compiled; 6 unfused);
- full recompute keeps each layer's input (2h) and one layer's activations; the first pipeline stage
  holds min(PP, micro-batches) micro-batches of its L/PP layers;
- context parallelism (--context-parallel-size CP, cp-attention): each rank holds s/CP tokens of
  every activation above (and of the loss); the distributed optimizer shards over the data- and
  context-parallel ranks together (upstream's model, which predates CP, is given that group's size
  and s/CP). Attention adds, once (the layer running), its working memory: the fp32 output
  accumulator, a block's output and its fp32 copy, and the K/V blocks in flight (p2p: the one held
  and the next; backward also the fp32 K/V gradients held and received), or with
  --cp-comm-type all_gather the whole sequence's K/V (gathered and reordered; in the backward also
  their fp32 gradients and the rank-ordered copy that is reduce-scattered);
- --fp8-format without TE (fp8-tensorwise-local): no FP8 weights or stored activations; while one
  GEMM runs, its widest operand (fc1's output gradient) as a float32 copy being scaled and as FP8
  plus a transposed FP8 copy: 6 bytes per element, once;
- optimizer temporaries: the fused torch AdamW has none; gradient clipping scales each main gradient
  through one temporary (4 bytes x the largest, the embedding's shard). They live after the backward
  pass, so the peak takes the larger of activations and temporaries, not their sum.
Not counted: the runtime and allocator, RCCL/NCCL buffers, fragmentation (a few GiB per GPU).
bench/memory_estimate.py compares the estimate with the measured peak on CPU.

Upstream's weight count knows MLA (LoRA ranks, decoupled RoPE heads, the latent norms), MoE layer
patterns, shared experts, routers and MTP layers, and shards experts over expert (tensor) parallel
ranks; rocmpatch's own count follows it and adds what it leaves out: the QK layer norms of grouped
attention (2 x head dim per layer) and each MTP layer's input projection and norms (2h^2 + 3h).
Upstream counts every attention weight as tensor-parallel, although MLA's down projections are
replicated over TP ranks (the recipes here run MLA at TP 1). Neither counts the router's expert bias
(a buffer, not trained by the optimizer).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

from rocmpatch.megatron_args import ParallelLayout, integer

GIB = 1 << 30
UPSTREAM_MODEL = "megatron/training/theoretical_memory_usage.py"
CPU_NORM_EXTRA = 5  # x h bytes per token: torch's composite rms_norm on the CPU keeps fp32 copies


@dataclass(frozen=True)
class Estimate:
    params_total: float
    params_per_gpu: float
    weights_and_grads_gib: float
    optimizer_gib: float
    activations_gib: float
    temporaries_gib: float
    upstream_activations_gib: float | None  # upstream's TE-path formula, for comparison
    source: str  # where weights and optimizer states were counted

    @property
    def total_gib(self) -> float:
        return self.weights_and_grads_gib + self.optimizer_gib + max(self.activations_gib, self.temporaries_gib)

    def to_json(self) -> dict:
        def r(x):
            return None if x is None else round(x, 1)
        return {"params_total_billion": round(self.params_total / 1e9, 2), "params_per_gpu_billion": round(self.params_per_gpu / 1e9, 2),
                "weights_and_grads_gib": r(self.weights_and_grads_gib), "optimizer_gib": r(self.optimizer_gib),
                "activations_gib": r(self.activations_gib), "optimizer_temporaries_gib": r(self.temporaries_gib),
                "upstream_activations_gib": r(self.upstream_activations_gib), "total_gib": r(self.total_gib),
                "weights_and_optimizer_from": self.source}


# ---------------------------------------------------------------- upstream's model


# Megatron's flags that make a model hybrid (Mamba layers between the transformer ones): neither
# upstream's model (report_theoretical_memory skips them) nor this one counts their layers.
HYBRID_FLAGS = ("--hybrid-layer-pattern", "--hybrid-override-pattern", "--hybrid-attention-ratio", "--hybrid-mlp-ratio")


def _hybrid_not_counted(_args) -> bool:
    raise AssertionError("upstream's is_hybrid_model stand-in was called: estimate() refuses hybrid models itself")


def refuse_hybrid(args: dict) -> None:
    """InvalidInput (one line) for a hybrid Mamba-Transformer model: its Mamba layers would be counted as dense ones."""
    hybrid = [flag for flag in HYBRID_FLAGS if args.get(flag) not in (None, False, 0, 0.0, "")]
    if hybrid:
        from rocmpatch.errors import InvalidInput

        raise InvalidInput("the recipe's flags", f"{hybrid[0]}: a hybrid Mamba-Transformer model, whose Mamba layers the memory estimate does not count",
                           hint="estimate it from a run's measured peak (bench/memory_estimate.py) instead; upstream's model skips hybrid models too")


def load_upstream_model(source: bytes, origin: str) -> ModuleType:
    """theoretical_memory_usage.py as a module, without importing Megatron (or torch): its one
    relative import (is_hybrid_model, print_rank_0 from megatron/training/utils.py) gets stand-ins."""
    package = "_rocmpatch_upstream_memory"
    if package not in sys.modules:
        parent = types.ModuleType(package)
        parent.__path__ = []
        utils = types.ModuleType(f"{package}.utils")
        utils.is_hybrid_model = _hybrid_not_counted  # only report_theoretical_memory asks; never called here
        utils.print_rank_0 = lambda *args, **kwargs: None
        sys.modules[package], sys.modules[f"{package}.utils"] = parent, utils
    spec = importlib.util.spec_from_loader(f"{package}.theoretical_memory_usage", loader=None, origin=origin)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, origin, "exec"), module.__dict__)
    return module


def upstream_model(release: str, target: Path | None = None) -> ModuleType | None:
    """Upstream's model from the target tree, else from the release's pinned commit in rocmpatch's
    cache (after `rocmpatch fetch`), else None."""
    if target is not None:
        path = target / UPSTREAM_MODEL
        return load_upstream_model(path.read_bytes(), str(path)) if path.is_file() else None
    from rocmpatch import gitcmd, releases, series, store
    from rocmpatch.errors import RocmpatchError

    try:
        lock = series.load(releases.choose(None, release).location).lock
        if lock is None:
            return None
        cache = store.commit_path(lock.upstream.commit)
        if not cache.is_dir():  # not fetched: the estimate says it counted without upstream
            return None
        repo = gitcmd.open_repo(cache)
        entry = gitcmd.paths_at(repo, lock.upstream.commit, [UPSTREAM_MODEL]).get(UPSTREAM_MODEL)
        if entry is None:
            return None
        source = gitcmd.read_blob(repo, entry.sha)
    except (RocmpatchError, OSError):
        return None
    return load_upstream_model(source, f"{UPSTREAM_MODEL} at {lock.upstream.commit[:12]} (rocmpatch cache)")


# ---------------------------------------------------------------- the arguments


def megatron_args(args: dict, vocab_size: int, world_size: int) -> SimpleNamespace:
    """The fields upstream's model reads, from recipe flags and Megatron's defaults."""
    h, heads = integer(args, "--hidden-size"), integer(args, "--num-attention-heads")
    layout = ParallelLayout.of(args, world_size)
    tp, pp, cp = layout.tp, layout.pp, layout.cp
    divisible = integer(args, "--make-vocab-size-divisible-by", 128) * tp
    padded = -(-integer(args, "--vocab-size", vocab_size) // divisible) * divisible
    experts = integer(args, "--num-experts") or None
    ffn = integer(args, "--ffn-hidden-size", 4 * h)
    gqa = bool(args.get("--group-query-attention"))
    layers = integer(args, "--num-layers")
    return SimpleNamespace(
        num_layers=layers, hidden_size=h, ffn_hidden_size=ffn, num_attention_heads=heads,
        kv_channels=integer(args, "--kv-channels", h // heads if heads else 0), group_query_attention=gqa,
        num_query_groups=integer(args, "--num-query-groups", heads) if gqa else heads, swiglu=bool(args.get("--swiglu")),
        normalization=args.get("--normalization", "LayerNorm"), add_bias_linear=not args.get("--disable-bias-linear"),
        untie_embeddings_and_output_weights=bool(args.get("--untie-embeddings-and-output-weights")), padded_vocab_size=padded,
        seq_length=integer(args, "--seq-length"), micro_batch_size=integer(args, "--micro-batch-size", 1),
        num_experts=experts, moe_ffn_hidden_size=integer(args, "--moe-ffn-hidden-size", ffn) if experts else None,
        moe_layer_freq=moe_layer_freq(args.get("--moe-layer-freq", 1), layers), moe_router_topk=integer(args, "--moe-router-topk", 2),
        moe_shared_expert_intermediate_size=integer(args, "--moe-shared-expert-intermediate-size") or None,
        moe_latent_size=None, moe_shared_expert_gate=bool(args.get("--moe-shared-expert-gate")),
        mtp_num_layers=integer(args, "--mtp-num-layers") or None, qk_layernorm=bool(args.get("--qk-layernorm")),
        multi_latent_attention=bool(args.get("--multi-latent-attention")), q_lora_rank=integer(args, "--q-lora-rank") or None,
        kv_lora_rank=integer(args, "--kv-lora-rank", 32), qk_head_dim=integer(args, "--qk-head-dim", 128),
        qk_pos_emb_head_dim=integer(args, "--qk-pos-emb-head-dim", 64), v_head_dim=integer(args, "--v-head-dim", 128),
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp, world_size=world_size,
        data_parallel_size=world_size // (tp * pp * cp), expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.expert_tp,
        virtual_pipeline_model_parallel_size=None, use_distributed_optimizer=bool(args.get("--use-distributed-optimizer")),
        sequence_parallel=bool(args.get("--sequence-parallel")), recompute_granularity=args.get("--recompute-granularity"),
    )


# ---------------------------------------------------------------- the estimate


def moe_layer_freq(value, num_layers: int | None) -> int | list[int]:
    """--moe-layer-freq as upstream's moe_freq_type reads it: N (every Nth layer is MoE, the first
    included) or a list expression such as ([0]*1+[1]*26) for a pattern of num_layers entries (any
    length when None). The expression is evaluated as arithmetic on integer lists only (ast), never
    run as code."""
    if isinstance(value, int) or "[" not in str(value):
        return int(value)

    def evaluate(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [evaluate(item) for item in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = evaluate(node.left), evaluate(node.right)
            if isinstance(node.op, ast.Mult) and max(x if isinstance(x, int) else len(x) for x in (left, right)) > 100_000:
                raise ValueError(f"--moe-layer-freq {value!r}: too long")
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"--moe-layer-freq {value!r}: only integer lists, + and * are understood")

    try:
        pattern = evaluate(ast.parse(str(value), mode="eval").body)
    except (SyntaxError, TypeError) as exc:
        raise ValueError(f"--moe-layer-freq {value!r}: only integer lists, + and * are understood") from exc
    length_ok = isinstance(pattern, list) and len(pattern) == (num_layers or len(pattern) or 1)
    if not length_ok or set(pattern) - {0, 1}:
        count = f"{num_layers} entries" if num_layers else "entries"
        raise ValueError(f"--moe-layer-freq {value!r}: expected {count} of 0 (dense) or 1 (MoE)")
    return pattern


def layer_pattern(freq: int | list[int], num_layers: int) -> list[int]:
    """moe_layer_freq()'s reading as one entry per layer: 1 for MoE, 0 for dense."""
    if isinstance(freq, list):
        return list(freq)
    return [1 if i % freq == 0 else 0 for i in range(num_layers)]


def moe_pattern(a: SimpleNamespace) -> list[int]:
    """1 for each MoE layer, 0 for each dense one."""
    if not a.num_experts:
        return [0] * a.num_layers
    return layer_pattern(a.moe_layer_freq, a.num_layers)


def _norm_weights(a: SimpleNamespace) -> int:
    """Weights per normalized element: RMSNorm a scale, LayerNorm a scale and a bias."""
    return 1 if a.normalization == "RMSNorm" else 2


def _norm_bytes(h: int, device: str) -> float:
    """Activation bytes per token a norm keeps: its bf16 input, plus the CPU's fp32 copies."""
    return 2 * h + (CPU_NORM_EXTRA * h if device == "cpu" else 0)


def _attention_parameters(a: SimpleNamespace) -> float:
    h, n = a.hidden_size, a.num_attention_heads
    if a.multi_latent_attention:
        norm = _norm_weights(a)
        q_head = a.qk_head_dim + a.qk_pos_emb_head_dim
        q = h * n * q_head if a.q_lora_rank is None else a.q_lora_rank * (h + n * q_head + norm)
        kv = h * (a.kv_lora_rank + a.qk_pos_emb_head_dim) + a.kv_lora_rank * (norm + n * (a.qk_head_dim + a.v_head_dim))
        return q + kv + n * a.v_head_dim * h
    q, kv = n * a.kv_channels, a.num_query_groups * a.kv_channels
    qk_norms = 2 * a.kv_channels * _norm_weights(a) if a.qk_layernorm else 0
    return h * (q + 2 * kv) + q * h + qk_norms


def _parameters(a: SimpleNamespace) -> tuple[float, float, float, float]:
    """(total, per GPU, largest tensor per GPU, per GPU over data parallel): rocmpatch's own count,
    split as upstream's is: tensor-parallel weights, replicated ones (norms, routers) and routed
    experts (over expert parallel x expert tensor parallel ranks). Per GPU: the most loaded one,
    with the first pipeline stage's layers, the MTP layers and the embedding."""
    h, L = a.hidden_size, a.num_layers
    gated = 3 if a.swiglu else 2
    experts = a.num_experts or 0
    attention = _attention_parameters(a)
    norms = _norm_weights(a) * 2 * h
    shared = gated * h * (a.moe_shared_expert_intermediate_size or 0)
    kinds = {0: (attention + gated * h * a.ffn_hidden_size, norms, 0.0),  # (TP-sharded, replicated, experts)
             1: (attention + shared, norms + h * experts, experts * gated * h * (a.moe_ffn_hidden_size or 0))}
    pattern = moe_pattern(a)
    tp, pp, ep = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.expert_model_parallel_size
    etp = a.expert_tensor_parallel_size
    block = [sum(kinds[k][part] for k in pattern) for part in range(3)]
    block[1] += h  # the final norm
    mtp_layers = a.mtp_num_layers or 0
    mtp = [mtp_layers * kinds[pattern[-1]][part] for part in range(3)] if mtp_layers else [0.0, 0.0, 0.0]
    if mtp_layers:  # its input projection (2h -> h) and the embedding, hidden and output norms
        mtp[0] += mtp_layers * 2 * h * h
        mtp[1] += mtp_layers * 1.5 * norms
    embedding = a.padded_vocab_size * h
    untied = a.untie_embeddings_and_output_weights
    total = sum(block) + sum(mtp) + embedding * (2 if untied else 1)
    dense = (block[0] / pp + mtp[0] + embedding) / tp + block[1] / pp + mtp[1]
    if untied and pp == 1:
        dense += embedding / tp
    expert = (block[2] / pp + mtp[2]) / (ep * etp)
    expert_dp = max(1, a.world_size // (ep * etp * pp))
    sharded = dense / _optimizer_shards(a) + expert / expert_dp
    return total, dense + expert, embedding / tp, sharded


def _optimizer_shards(a: SimpleNamespace) -> int:
    """The distributed optimizer's shard group: the data-parallel ranks with their context-parallel ones."""
    return a.data_parallel_size * a.context_parallel_size


def _upstream_view(a: SimpleNamespace) -> SimpleNamespace:
    """The fields as upstream's model (which predates context parallelism) must see them: each rank
    holds s/CP tokens, and the optimizer is sharded over data x context parallel ranks."""
    cp = a.context_parallel_size
    return SimpleNamespace(**{**vars(a), "seq_length": a.seq_length // cp, "data_parallel_size": _optimizer_shards(a)})


def _cp_attention_bytes(a: SimpleNamespace, args: dict, tokens: float) -> float:
    """Context-parallel attention's working memory in the layer running (bytes, per TP rank's heads):
    tokens = this rank's s/CP x b. Forward: the fp32 output accumulator (4q) and a block's output
    with its fp32 copy (6q) per query token, and the K/V blocks (bf16) held and in flight. Backward:
    dq in fp32 (4q) and a block's dq (2q), the K/V blocks, their block gradients (4kv) and the fp32
    dK/dV accumulated and received (p2p: 16kv per key token; all_gather: 8kv for the whole sequence
    plus the rank-ordered copy reduce-scattered, 8kv). Grouped K/V heads as they are (the flash
    kernels take them)."""
    cp = a.context_parallel_size
    if cp == 1:
        return 0.0
    q = a.num_attention_heads * a.kv_channels
    kv = a.num_query_groups * a.kv_channels
    if str(args.get("--cp-comm-type", "p2p")).replace("_", "") == "allgather":
        whole = tokens * cp  # the gathered K/V, and in sequence order
        forward = tokens * 10 * q + whole * 2 * 4 * kv
        backward = tokens * 6 * q + whole * (2 * 4 * kv + 4 * kv + 8 * kv + 8 * kv)
    else:
        forward = tokens * (10 * q + 2 * 4 * kv)  # the K/V block held and the next
        backward = tokens * (6 * q + 2 * 4 * kv + 4 * kv + 16 * kv)
    return max(forward, backward) / a.tensor_model_parallel_size


def _attention_bytes_per_token(a: SimpleNamespace, args: dict, norm: float) -> float:
    h, n = a.hidden_size, a.num_attention_heads
    if a.multi_latent_attention:
        q_head = a.qk_head_dim + a.qk_pos_emb_head_dim
        latents = 2 * (a.kv_lora_rank + a.qk_pos_emb_head_dim) + 2 * a.kv_lora_rank
        if a.q_lora_rank is not None:
            latents += 4 * a.q_lora_rank
        qkv = 2 * 2 * n * q_head + 2 * n * max(q_head, a.v_head_dim)  # values padded to q_head (0056)
        attention = norm + 2 * h + latents + qkv + 2 * n * a.v_head_dim + 4 * n + 2 * n * a.v_head_dim
    else:
        q = n * a.kv_channels
        kv = a.num_query_groups * a.kv_channels
        rope = 2 * (q + kv) if args.get("--position-embedding-type", "learned_absolute") == "rope" else 0
        attention = norm + 2 * h + 2 * (q + 2 * kv) + rope + 2 * q + 4 * n + 2 * q
    if args.get("--attention-backend") == "unfused":
        attention += 5 * n * a.seq_length
    return attention


def _layer_bytes_per_token(a: SimpleNamespace, args: dict, device: str, moe: bool) -> float:
    h = a.hidden_size
    norm = _norm_bytes(h, device)
    attention = _attention_bytes_per_token(a, args, norm)
    fused = not args.get("--no-bias-swiglu-fusion")  # only SwiGLU's fc1 output depends on its fusion

    def mlp_bytes(f: int) -> float:
        fc1 = (4 * f if fused else 8 * f) if a.swiglu else 2 * f
        return 2 * h + fc1 + 2 * f

    if not moe:
        return attention + norm + mlp_bytes(a.ffn_hidden_size)
    mlp = (mlp_bytes(a.moe_ffn_hidden_size) + 4 * h) * a.moe_router_topk + 8 * a.num_experts
    if a.moe_shared_expert_intermediate_size:
        mlp += mlp_bytes(a.moe_shared_expert_intermediate_size)
    return attention + norm + mlp


def _fp8_bytes(a: SimpleNamespace, args: dict, tokens: float) -> float:
    """--fp8-format without TE (fp8-tensorwise-local) keeps no FP8 weights or activations: its buffers
    live while one GEMM runs. The largest: the widest operand (fc1's output gradient, SwiGLU's
    doubled width) copied to float32 while it is scaled (4 bytes), then in FP8 and its transposed
    FP8 copy (1 + 1), one layer at a time."""
    if not args.get("--fp8-format"):
        return 0.0
    widest = max(a.ffn_hidden_size * (2 if a.swiglu else 1), a.hidden_size)
    return 6 * tokens * widest / a.tensor_model_parallel_size


def estimate(args: dict, vocab_size: int, world_size: int, *, upstream: ModuleType | None = None, device: str = "gpu") -> Estimate:
    """Memory per GPU (the most loaded one: the first pipeline stage, plus the loss where PP = 1).

    upstream: megatron/training/theoretical_memory_usage.py of the release (upstream_model());
    without it the weights and optimizer states are counted by rocmpatch (same bytes per
    parameter) and the estimate says so. device: "gpu", or "cpu" for torch's CPU kernels."""
    refuse_hybrid(args)
    a = megatron_args(args, vocab_size, world_size)
    total, per_gpu, largest, sharded = _parameters(a)
    weights_and_grads = 6 * per_gpu
    if upstream is not None:
        view = _upstream_view(a)
        weights_and_optimizer = upstream.compute_weight_and_optimizer_memory(view)
        source = f"upstream {UPSTREAM_MODEL}"
        if a.sequence_parallel and a.recompute_granularity == "selective":
            upstream_activations = upstream.compute_activation_memory(view, None)
        else:
            upstream_activations = upstream.compute_activation_memory_without_sp(view, None)
    else:
        weights_and_optimizer = weights_and_grads + 12 * (sharded if a.use_distributed_optimizer else per_gpu)
        source = f"rocmpatch's own count (no {UPSTREAM_MODEL}: give the target tree, or run `rocmpatch fetch`)"
        upstream_activations = None

    s, b, h = a.seq_length, a.micro_batch_size, a.hidden_size
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    tokens = s * b / a.context_parallel_size  # this rank's
    stage = moe_pattern(a)[:max(1, a.num_layers // pp)]  # the first stage's layers
    layers = [_layer_bytes_per_token(a, args, device, moe=bool(kind)) * tokens / tp for kind in stage]
    microbatches = max(1, integer(args, "--global-batch-size", b) // (b * a.data_parallel_size))
    in_flight = min(pp, microbatches)
    if a.recompute_granularity == "full":
        activations = len(stage) * in_flight * 2 * tokens * h / tp + max(layers)
    else:
        activations = in_flight * sum(layers)
    activations += _cp_attention_bytes(a, args, tokens)
    activations += _fp8_bytes(a, args, tokens)
    if pp == 1:
        norm = _norm_bytes(h, device)
        loss = 10 if args.get("--cross-entropy-loss-fusion") else 6
        activations += tokens * (norm + 2 * h) / tp + tokens * loss * a.padded_vocab_size / tp
    temporaries = 4 * (largest / _optimizer_shards(a) if a.use_distributed_optimizer else largest)
    return Estimate(total, per_gpu, weights_and_grads / GIB, (weights_and_optimizer - weights_and_grads) / GIB,
                    activations / GIB, temporaries / GIB,
                    None if upstream_activations is None else upstream_activations / GIB, source)
