"""The op checks of the ops stage: each builds one torch-native replacement of the series the way
Megatron does (fusion requested) and returns [(what, output, fp32 reference), ...] for one device and
dtype. A release profile (release.yaml `smoke.ops`) lists them: by name from REGISTRY (checks of
megatron.core code, where every release keeps it), or as an entry {name, kind, module, ...} of one
of KINDS, for code whose module only that release's tree has (a legacy layout). `checks(ops)` is the
table ops.py runs for a profile; ops.py compares, tolerates and reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rocmpatch.env.advice import AOTRITON_EXPERIMENTAL as ROCM_EXPERIMENTAL_ATTENTION
from rocmpatch.env.facts import gpu_arch


class OutOfTolerance(Exception):
    """A check found a wrong result it can name without comparing numbers (a dtype, a lost attribute)."""


class NotOnThisDevice(Exception):
    """The device has no kernel for what the check asks (FP8 GEMMs on gfx90a): skipped, saying why."""


# --- the checks: each returns [(what, output, reference), ...] for one device and dtype -------------

def _softmax_inputs(torch, device, dtype, b=2, heads=4, sq=64, sk=64):
    generator = torch.Generator().manual_seed(1234)
    scores = (torch.randn(b, heads, sq, sk, generator=generator) * 4).to(device=device, dtype=dtype)
    grad = torch.randn(b, heads, sq, sk, generator=generator).to(device)
    causal = torch.triu(torch.ones(sq, sk, dtype=torch.bool), diagonal=1).to(device).view(1, 1, sq, sk)
    padding = torch.rand(b, 1, sq, sk, generator=generator) < 0.3
    padding[..., 0] = False  # no row fully masked
    return scores, grad, causal, padding.to(device)


def _softmax_reference(torch, scores, mask, scale, grad):
    x = scores.detach().float().requires_grad_()
    y = x * scale
    if mask is not None:
        y = y.masked_fill(mask, -10000.0)
    probs = torch.softmax(y, dim=-1)
    (probs * grad).sum().backward()
    return probs, x.grad


def _run_softmax(torch, module_name: str, enums_module: str, variant: str, device, dtype):
    import importlib

    softmax_module = importlib.import_module(module_name)
    mask_type = importlib.import_module(enums_module).AttnMaskType
    scores, grad, causal, padding = _softmax_inputs(torch, device, dtype)
    scale = 0.5
    mask_given = {"causal": causal, "causal-no-mask": None, "padding": padding, "no-mask": None}[variant]
    kind = mask_type.causal if variant.startswith("causal") else mask_type.padding

    def mask_func(scores_, mask_):
        return scores_.masked_fill(mask_, -10000.0)

    layer = softmax_module.FusedScaleMaskSoftmax(
        dtype == torch.float16, dtype == torch.bfloat16, kind, True, mask_func,
        True, scale)  # scaled_masked_softmax_fusion=True, softmax_in_fp32=True
    x = scores.detach().clone().requires_grad_()
    probs = layer(x, mask_given)
    (probs.float() * grad).sum().backward()
    reference_mask = causal if variant.startswith("causal") else mask_given
    ref_probs, ref_grad = _softmax_reference(torch, scores, reference_mask, scale, grad)
    if probs.dtype != dtype:
        raise OutOfTolerance(f"output dtype {probs.dtype}, expected {dtype}")
    return [("forward", probs, ref_probs), ("backward", x.grad, ref_grad)]


def _config(torch, **overrides):
    from megatron.core.transformer.transformer_config import TransformerConfig

    values = dict(num_layers=1, hidden_size=1024, num_attention_heads=8, persist_layer_norm=True)
    values.update(overrides)
    return TransformerConfig(**values)


def _norm_reference(torch, x, weight, bias, eps, rms: bool, grad):
    xs = x.detach().float().requires_grad_()
    w = weight.detach().float().requires_grad_()
    b = bias.detach().float().requires_grad_() if bias is not None else None
    if rms:
        y = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps) * w
    else:
        y = torch.nn.functional.layer_norm(xs, xs.shape[-1:], w, b, eps)
    (y * grad).sum().backward()
    return y, xs.grad, w.grad, (b.grad if b is not None else None)


def _run_norm(torch, build: Callable, zero_centered: bool, rms: bool, device, dtype):
    generator = torch.Generator().manual_seed(99)
    hidden = 1024
    layer = build(hidden).to(device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(hidden, generator=generator) * 0.1 + (0.0 if zero_centered else 1.0))
        if getattr(layer, "bias", None) is not None:
            layer.bias.copy_(torch.randn(hidden, generator=generator) * 0.1)
    if not getattr(layer.weight, "sequence_parallel", None) in (True, False):
        raise OutOfTolerance("weight lost its sequence_parallel attribute")
    x = (torch.randn(16, 2, hidden, generator=generator) * 3 + 1).to(device=device, dtype=dtype).requires_grad_()
    grad = torch.randn(16, 2, hidden, generator=generator).to(device)
    out = layer(x)
    (out.float() * grad).sum().backward()
    effective = layer.weight.detach().float() + (1.0 if zero_centered else 0.0)
    bias = getattr(layer, "bias", None)
    ref, ref_dx, ref_dw, ref_db = _norm_reference(torch, x, effective, bias, layer.eps, rms, grad)
    pairs = [("forward", out, ref), ("backward input", x.grad, ref_dx), ("backward weight", layer.weight.grad, ref_dw)]
    if ref_db is not None:
        pairs.append(("backward bias", layer.bias.grad, ref_db))
    return pairs


def _core_norm(torch, normalization: str, zero_centered: bool):
    def build(hidden):
        from megatron.core.fusions.fused_layer_norm import FusedLayerNorm

        config = _config(torch, normalization=normalization, layernorm_zero_centered_gamma=zero_centered)
        return FusedLayerNorm(config, hidden, eps=1e-5, persist_layer_norm=True,
                              zero_centered_gamma=zero_centered, normalization=normalization)
    return build


def _torch_norm(torch, normalization: str):
    def build(hidden):
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        return WrappedTorchNorm(_config(torch, normalization=normalization, persist_layer_norm=False), hidden,
                                eps=1e-5, normalization=normalization)
    return build


def _mixed_fused_norm(module: str, zero_centered: bool):
    """The pre-megatron.core MixedFusedLayerNorm (apex's fused norm in upstream), from `module`."""
    def build(hidden):
        import importlib

        norm = importlib.import_module(module).MixedFusedLayerNorm
        return norm(hidden, eps=1e-5, no_persist_layer_norm=False, sequence_parallel=False,
                    apply_layernorm_1p=zero_centered)
    return build


def _rope_freqs(torch, seq, dim, device):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]  # [s, 1, 1, d]


def _run_rope_apply(torch, device, dtype):
    from megatron.core.models.common.embeddings.rotary_pos_embedding import apply_rotary_pos_emb

    generator = torch.Generator().manual_seed(7)
    seq, batch, heads, dim = 32, 2, 4, 64
    t = torch.randn(seq, batch, heads, dim, generator=generator).to(device=device, dtype=dtype).requires_grad_()
    grad = torch.randn(seq, batch, heads, dim, generator=generator).to(device)
    freqs = _rope_freqs(torch, seq, dim, device)
    config = _config(torch, hidden_size=heads * dim, num_attention_heads=heads, apply_rope_fusion=True)
    out = apply_rotary_pos_emb(t, freqs, config=config)
    (out.float() * grad).sum().backward()
    ts = t.detach().float().requires_grad_()
    half = dim // 2
    rotated = torch.cat((-ts[..., half:], ts[..., :half]), dim=-1)
    ref = ts * freqs.cos() + rotated * freqs.sin()
    (ref * grad).sum().backward()
    return [("forward", out, ref), ("backward", t.grad, ts.grad)]


def _run_rope_embedding(torch, device, dtype):
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    embedding = RotaryEmbedding(kv_channels=64, rotary_percent=1.0)
    freqs = embedding(32)
    return [("frequencies", freqs, _rope_freqs(torch, 32, 64, freqs.device))]


def _params(torch, device, count=4, seed=5):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(64, 32), (32,), (128, 64), (7,)][:count]
    return [torch.randn(*s, generator=generator).to(device) for s in shapes], generator


def _run_optimizer(torch, module: str, kind: str, device, dtype):
    import importlib

    megatron_optimizer = importlib.import_module(module)

    values, generator = _params(torch, device)
    ours = [torch.nn.Parameter(v.clone()) for v in values]
    theirs = [torch.nn.Parameter(v.clone()) for v in values]
    if kind == "Adam":  # as get_megatron_optimizer builds it; apex FusedAdam was AdamW
        optimizer = megatron_optimizer.Adam(ours, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
        reference = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    else:
        optimizer = megatron_optimizer.SGD(ours, lr=1e-2, weight_decay=0.1, momentum=0.9)
        reference = torch.optim.SGD(theirs, lr=1e-2, weight_decay=0.1, momentum=0.9, foreach=False)
    for _ in range(3):
        for a, b in zip(ours, theirs):
            g = torch.randn(a.shape, generator=generator).to(device)
            a.grad, b.grad = g.clone(), g.clone()
        optimizer.step()
        reference.step()
    return [(f"param {i}", a, b) for i, (a, b) in enumerate(zip(ours, theirs))]


def _params_with_grads(torch, device):
    """Two identical parameter sets with the same large gradients: ours for Megatron, theirs for torch."""
    values, generator = _params(torch, device)
    ours = [torch.nn.Parameter(v.clone()) for v in values]
    theirs = [torch.nn.Parameter(v.clone()) for v in values]
    for a, b in zip(ours, theirs):
        g = torch.randn(a.shape, generator=generator).to(device) * 3
        a.grad, b.grad = g.clone(), g.clone()
    return ours, theirs


def _clip_pairs(torch, norm, ours, theirs):
    """Megatron's norm and clipped gradients beside torch.nn.utils.clip_grad_norm_'s on `theirs`."""
    ref_norm = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    pairs = [("norm", torch.tensor([float(norm)]), ref_norm.reshape(1).cpu())]
    return pairs + [(f"grad {i}", a.grad, b.grad) for i, (a, b) in enumerate(zip(ours, theirs))]


def _run_clip(torch, module: str, device, dtype):
    """The pre-megatron.core clip_grad_norm_fp32(parameters, grads, max_norm, ...), from `module`."""
    import importlib

    clip_grad_norm_fp32 = importlib.import_module(module).clip_grad_norm_fp32
    ours, theirs = _params_with_grads(torch, device)
    norm = clip_grad_norm_fp32(ours, [p.grad for p in ours], 1.0, False)
    return _clip_pairs(torch, norm, ours, theirs)


def _run_core_clip(torch, device, dtype):
    """megatron.core's split of clip_grad_norm_fp32: the norm, then clipping by it."""
    from megatron.core.optimizer.clip_grads import clip_grad_by_total_norm_fp32, get_grad_norm_fp32

    ours, theirs = _params_with_grads(torch, device)
    norm = get_grad_norm_fp32([p.grad for p in ours])
    clip_grad_by_total_norm_fp32(ours, 1.0, norm)
    return _clip_pairs(torch, norm, ours, theirs)


def _run_grad_accum_linear(torch, api: str, device, dtype):
    """A linear layer with gradient-accumulation fusion requested (Megatron's default): without apex's
    fused_weight_gradient_mlp_cuda the series falls back to the unfused weight-gradient GEMM."""
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import layers

    generator = torch.Generator().manual_seed(11)
    x = torch.randn(8, 2, 64, generator=generator).to(device=device, dtype=dtype).requires_grad_()
    grad = torch.randn(8, 2, 96, generator=generator).to(device)
    if api == "ColumnParallelLinear":
        config = ModelParallelConfig(params_dtype=dtype, use_cpu_initialization=device.type == "cpu",
                                     gradient_accumulation_fusion=True)
        layer = layers.ColumnParallelLinear(64, 96, config=config, bias=True,
                                            init_method=lambda w: torch.nn.init.normal_(w, std=0.1))
        weight, bias = layer.weight, layer.bias
        out, _ = layer(x)
    else:  # what the legacy language model calls directly for its output layer
        weight = torch.nn.Parameter((torch.randn(96, 64, generator=generator) * 0.1).to(device=device, dtype=dtype))
        bias = torch.nn.Parameter((torch.randn(96, generator=generator) * 0.1).to(device=device, dtype=dtype))
        out = layers.linear_with_grad_accumulation_and_async_allreduce(x, weight, bias, True, False, False)
    (out.float() * grad).sum().backward()
    xs, ws, bs = (t.detach().float().requires_grad_() for t in (x, weight, bias))
    ref = torch.nn.functional.linear(xs, ws, bs)
    (ref * grad).sum().backward()
    if weight.grad is None:
        raise OutOfTolerance("no weight gradient: the fused path was taken without a main_grad to fill")
    return [("forward", out, ref), ("backward input", x.grad, xs.grad), ("backward weight", weight.grad, ws.grad),
            ("backward bias", bias.grad, bs.grad)]


def _attention_reference(torch, q, k, v, groups, scale, causal, mask, grad):
    """Attention written out in fp32: GQA groups repeated, scores, mask, softmax, context."""
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    query, key, value = (t.permute(1, 2, 0, 3) for t in (qf, kf.repeat_interleave(groups, dim=2), vf.repeat_interleave(groups, dim=2)))
    scores = query @ key.transpose(-1, -2) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    context = (scores.softmax(dim=-1) @ value).permute(2, 0, 1, 3).reshape(q.shape[0], q.shape[1], -1)
    (context * grad).sum().backward()
    return context, qf.grad, kf.grad, vf.grad


def _run_core_attention(torch, variant: str, device, dtype):
    """megatron.core's DotProductAttention (the attention without Transformer Engine), GQA with 4
    query heads per key/value head: causal without a mask, or with a boolean padding mask."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    heads, groups, head_dim, seq, batch = 8, 2, 64, 128, 2
    config = _config(torch, hidden_size=heads * head_dim, num_attention_heads=heads, num_query_groups=groups, attention_dropout=0.0)
    causal = variant == "causal"
    layer = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal if causal else AttnMaskType.padding,
                                attention_type="self").to(device)
    generator = torch.Generator().manual_seed(11)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype).requires_grad_()

    q, k, v = tensor(seq, batch, heads, head_dim), tensor(seq, batch, groups, head_dim), tensor(seq, batch, groups, head_dim)
    mask = None
    if not causal:  # True = masked out: the last keys of the second sample are padding
        mask = torch.zeros(batch, 1, seq, seq, dtype=torch.bool)
        mask[1, :, :, seq - 40:] = True
        mask = mask.to(device)
    grad = torch.randn(seq, batch, heads * head_dim, generator=generator).to(device)
    out = layer(q, k, v, attention_mask=mask)
    if out.dtype != dtype:
        raise OutOfTolerance(f"output dtype {out.dtype}, expected {dtype}")
    (out.float() * grad).sum().backward()
    ref, ref_dq, ref_dk, ref_dv = _attention_reference(torch, q, k, v, heads // groups, head_dim ** -0.5, causal, mask, grad)
    return [("forward", out, ref), ("backward query", q.grad, ref_dq), ("backward key", k.grad, ref_dk),
            ("backward value", v.grad, ref_dv)]


def recipe_attention_shapes() -> tuple[tuple, ...]:
    """The attention shape one GPU computes in each layout of each bundled recipe
    (rocmpatch/recipes/*.yaml), once each: (label, query heads / TP, key-value groups / TP, head dim,
    sequence / CP[, value head dim where it differs: multi-latent attention])."""
    from rocmpatch.megatron_args import AttentionShape, ParallelLayout
    from rocmpatch.recipes.catalog import find, names

    shapes: dict[tuple, str] = {}
    for name in names():
        recipe = find(name)
        for layout in recipe.layouts:
            args = recipe.merged_args(layout)
            parallel = ParallelLayout.of(args, layout.world_size)
            shape = AttentionShape.of(args, parallel)
            key = (shape.heads, shape.groups, shape.head_dim, shape.seq, *((shape.v_head_dim,) if shape.v_head_dim else ()))
            label = name + (f" at TP {parallel.tp}" if parallel.tp > 1 else "") + (f" CP {parallel.cp}" if parallel.cp > 1 else "")
            shapes.setdefault(key, label)
    return tuple((label, *key) for key, label in shapes.items())


RECIPE_ATTENTION_SHAPES = recipe_attention_shapes()


def _no_fused_kernel(torch, exc: BaseException, caught, device, shape: str) -> str:
    """Why SDPA found neither flash nor memory-efficient kernel, and what to set."""
    import os

    reasons = [str(w.message).splitlines()[0] for w in caught
               if "attention" in str(w.message).lower() and "kernel not used because" not in str(w.message)]
    detail = f"SDPA has no flash or memory-efficient kernel for {shape}: " + ("; ".join(dict.fromkeys(reasons)) or str(exc).splitlines()[0])
    if torch.version.hip and not os.environ.get(ROCM_EXPERIMENTAL_ATTENTION):
        arch = gpu_arch(torch, device) if device.type == "cuda" else ""
        detail += (f". On {arch or 'this GPU'} AOTriton's attention kernels may be experimental: export "
                   f"{ROCM_EXPERIMENTAL_ATTENTION}=1 (rocmpatch env says which GPUs need it)")
    return detail + "; without a fused kernel training falls back to the math path, which materializes the [b, heads, s, s] scores"


def _run_attention_kernels(torch, shape, variant: str, device, dtype):
    """The patched DotProductAttention at a recipe's attention shape, allowed only the flash and
    memory-efficient SDPA kernels (torch.nn.attention.sdpa_kernel): a fall to the math path fails
    here with PyTorch's reason. causal: is_causal with grouped heads (the flash kernels);
    documents: a --reset-attention-mask document mask (the memory-efficient kernel). The output's
    first 256 queries are compared with fp32 math (they see only the first 256 keys)."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    label, heads, groups, head_dim, seq, *v_head_dim = shape
    if device.type == "cpu":
        seq = 256  # the same code on the CPU's flash kernel, at a size a CPU computes in seconds
    config = _config(torch, hidden_size=heads * head_dim, num_attention_heads=heads, num_query_groups=groups,
                     kv_channels=head_dim, attention_dropout=0.0, bf16=dtype == torch.bfloat16,
                     fp16=dtype == torch.float16, params_dtype=dtype)
    # Multi-latent attention's value heads differ: DotProductAttention takes both sizes, as MLA builds it.
    heads_v = {"k_channels": head_dim, "v_channels": v_head_dim[0]} if v_head_dim else {}
    v_dim = v_head_dim[0] if v_head_dim else head_dim
    layer = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self",
                                **heads_v).to(device)
    generator = torch.Generator().manual_seed(5)

    def tensor(*size):
        return torch.randn(*size, generator=generator).to(device=device, dtype=dtype).requires_grad_()

    q, k, v = tensor(seq, 1, heads, head_dim), tensor(seq, 1, groups, head_dim), tensor(seq, 1, groups, v_dim)
    mask = None
    if variant == "documents":  # two documents: the second's queries do not see the first's keys
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
        mask[seq // 2:, :seq // 2] = True
        mask = mask.view(1, 1, seq, seq)
    sizes = f"{head_dim}/{v_dim}" if v_head_dim else f"{head_dim}"
    where = f"{label} ({heads} heads / {groups} groups x {sizes}, sequence {seq}, {variant})"
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        warnings.simplefilter("always")
        try:
            out = layer(q, k, v, attention_mask=mask)
            out.float().sum().backward()
        except RuntimeError as exc:
            if "No available kernel" not in str(exc):
                raise
            raise OutOfTolerance(_no_fused_kernel(torch, exc, caught, device, where)) from None
    n = min(256, seq)
    ref_mask = None if mask is None else mask[..., :n, :n]
    ref, *_ = _attention_reference(torch, q[:n], k[:n], v[:n], heads // groups, head_dim ** -0.5, mask is None, ref_mask,
                                   torch.zeros(n, 1, heads * v_dim, device=device))
    grads_finite = all(bool(t.grad.isfinite().all()) for t in (q, k, v))
    if not grads_finite:
        raise OutOfTolerance(f"{where}: non-finite gradients")
    return [("forward (first 256 queries)", out[:n], ref)]


@dataclass
class Check:
    name: str
    module_path: str  # repository path of the code under test: decides availability and blame
    run: Callable  # (torch, device, dtype) -> [(what, out, ref)]
    dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")


# --- the registry: release.yaml's smoke.ops names entries of it --------------------------------
# Each entry is a stable name and the checks it stands for; every check names the repository file of
# the code it exercises. A release's smoke profile lists the entries that fit its tree; a listed check
# whose file a given tree lacks (a core-only tree has no training code) does not run there.

CORE_SOFTMAX = "megatron/core/fusions/fused_softmax.py"
CORE_NORM = "megatron/core/fusions/fused_layer_norm.py"
ROPE = "megatron/core/models/common/embeddings/rotary_pos_embedding.py"
CORE_OPTIMIZER = "megatron/core/optimizer/__init__.py"
CORE_CLIP = "megatron/core/optimizer/clip_grads.py"
TENSOR_PARALLEL_LAYERS = "megatron/core/tensor_parallel/layers.py"
CORE_ATTENTION = "megatron/core/transformer/dot_product_attention.py"
TORCH_NORM = "megatron/core/transformer/torch_norm.py"
GROUPED_EXPERTS = "megatron/core/transformer/moe/torch_grouped_mlp.py"
FP8_LINEAR = "megatron/core/extensions/torch_fp8.py"
TE_SPEC_LAYERS = "megatron/core/extensions/torch_te_layers.py"
SOFTMAX_VARIANTS = ("causal", "causal-no-mask", "padding", "no-mask")


def recipe_expert_shapes() -> tuple[tuple, ...]:
    """The routed experts of each bundled MoE recipe (rocmpatch/recipes/*.yaml): (recipe, experts,
    hidden, FFN per expert: --moe-ffn-hidden-size, else --ffn-hidden-size)."""
    from rocmpatch.recipes.catalog import find, names

    shapes = []
    for name in names():
        args = find(name).args
        if args.get("--num-experts"):
            ffn = args.get("--moe-ffn-hidden-size") or args["--ffn-hidden-size"]
            shapes.append((name, int(args["--num-experts"]), int(args["--hidden-size"]), int(ffn)))
    return tuple(shapes)


RECIPE_EXPERT_SHAPES = recipe_expert_shapes()


def _run_grouped_gemm(torch, shape, device, dtype):
    """The grouped experts' linear layers (moe-grouped-gemm-local: TorchGroupedMLP's fc1 with SwiGLU's
    doubled width, and fc2) at a MoE recipe's expert shape, every expert's tokens in one grouped GEMM
    (expert 1 gets none), forward and backward, against one fp32 matmul per expert. Each result names
    the kernel that ran: torch's grouped GEMM, or the per-expert fallback the module says it takes."""
    from megatron.core.transformer.moe import torch_grouped_mlp as grouped

    label, experts, hidden, ffn = shape
    tokens = 4096
    if device.type == "cpu":  # the same code at a size a CPU computes in seconds
        experts, hidden, ffn, tokens = min(experts, 4), hidden // 32, ffn // 16, 128
    generator = torch.Generator().manual_seed(7)
    counts = torch.bincount(torch.randint(0, experts, (tokens,), generator=generator), minlength=experts)
    counts[0] += counts[1]
    counts[1] = 0
    counts = counts.tolist()
    results = []
    for name, (n_in, n_out) in (("fc1", (hidden, 2 * ffn)), ("fc2", (ffn, hidden))):
        x = (torch.randn(tokens, n_in, generator=generator)).to(device=device, dtype=dtype).requires_grad_()
        weights = [(torch.randn(n_out, n_in, generator=generator) * n_in ** -0.5).to(device=device, dtype=dtype)
                   .requires_grad_() for _ in range(experts)]
        grad = torch.randn(tokens, n_out, generator=generator).to(device)
        out = grouped.grouped_linear(x, weights, counts)
        (out.float() * grad).sum().backward()
        kernel = grouped.GROUPED_MM_NAME if grouped.runs_grouped_kernel(device, dtype, n_in, n_out) else \
            "per-expert matmul (no grouped kernel)"
        xs = x.detach().float().requires_grad_()
        ws = [w.detach().float().requires_grad_() for w in weights]
        ref = torch.cat([chunk @ w.t() for chunk, w in zip(xs.split(counts), ws)])
        (ref * grad).sum().backward()
        where = f"{label} {name} [{n_in} -> {n_out}] x {experts}, {kernel}"
        results += [(f"{where} forward", out, ref), (f"{where} backward input", x.grad, xs.grad),
                    (f"{where} backward weight", torch.stack([w.grad for w in weights]),
                     torch.stack([w.grad for w in ws]))]
    return results


def _run_fp8_gemm(torch, device, dtype):
    """One linear layer's three GEMMs (forward, grad-input, grad-weight) through fp8-tensorwise-local
    (torch._scaled_mm, tensorwise dynamic scaling, hybrid: e5m2 gradients) in the device's formats,
    each against the same GEMM in fp32 on the dequantized FP8 operands; the FP8 rounding against
    the BF16 GEMM of the unquantized operands must stay within 10%. Each result names the formats
    (fnuz on gfx942, OCP on gfx950, CUDA and CPU); a device without FP8 GEMMs is skipped saying why."""
    from megatron.core.extensions import torch_fp8

    try:
        formats = torch_fp8.probe(device)
    except torch_fp8.Fp8Unavailable as error:
        raise NotOnThisDevice(f"FP8 is not available: {error}") from None
    tokens, hidden, out_features = (8192, 4096, 4096) if device.type == "cuda" else (64, 64, 32)
    recipe = torch_fp8.TensorwiseFp8(hybrid=True)
    forward_format, gradient_format = recipe.formats(device)
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(tokens, hidden, generator=generator).to(device=device, dtype=dtype)
    w = (torch.randn(out_features, hidden, generator=generator) * hidden ** -0.5).to(device=device, dtype=dtype)
    g = (torch.randn(tokens, out_features, generator=generator) * 1e-3).to(device=device, dtype=dtype)
    (xq, xs), (wq, ws), (gq, gs) = (torch_fp8.quantize(x, forward_format), torch_fp8.quantize(w, forward_format),
                                    torch_fp8.quantize(g, gradient_format))
    xd, wd, gd = xq.float() * xs, wq.float() * ws, gq.float() * gs
    where = f"{formats} [{tokens} x {hidden} -> {out_features}]"
    results = [(f"{where} forward", recipe.forward(x, w), xd @ wd.t()),
               (f"{where} grad-input", recipe.dgrad(g, w), gd @ wd),
               (f"{where} grad-weight", recipe.wgrad(g, x), gd.t() @ xd)]
    for (what, out, _), bf16 in zip(results, (x @ w.t(), g @ w, g.t() @ x)):
        rounding = ((out.float() - bf16.float()).abs().max() / bf16.float().abs().max()).item()
        if rounding > 0.1:
            raise OutOfTolerance(f"{what}: {rounding:.3g} from the BF16 GEMM (FP8 rounding allows 0.1)")
    return results


# What each Transformer Engine module registers, in order (TE 2.x: module/layernorm_linear.py
# registers layer_norm_weight, then layer_norm_bias unless RMSNorm, then weight and bias;
# module/linear.py weight and bias; the LayerNorm/RMSNorm ops weight and bias; DotProductAttention
# none without a learnable softmax offset): "?" only with LayerNorm, "+" only where the linear has a
# bias. Every one of them also has an `_extra_state`. tests/series/test_te_spec_torch.py checks the
# torch modules of te-spec-torch against this table on every model it builds.
TE_PARAMETERS = {
    "TELayerNormColumnParallelLinear": ("layer_norm_weight", "layer_norm_bias?", "weight", "bias+"),
    "TEColumnParallelLinear": ("weight", "bias+"),
    "TERowParallelLinear": ("weight", "bias+"),
    "TELinear": ("weight", "bias+"),
    "TENorm": ("weight", "bias?"),
    "TEDotProductAttention": (),
}


def te_parameter_names(te_module: str, normalization: str, linear_bias: bool) -> list[str]:
    """TE_PARAMETERS[te_module] for a layer with this normalization and linear biases or none."""
    names = []
    for name in TE_PARAMETERS[te_module]:
        if name.endswith("?") and normalization != "LayerNorm" or name.endswith("+") and not linear_bias:
            continue
        names.append(name.rstrip("?+"))
    return names


# A local spec layer's parameters in the TE spec's names: the norms it fuses into the next linear.
LOCAL_TO_TE = {
    ".input_layernorm.": ".self_attention.linear_qkv.layer_norm_",
    ".pre_mlp_layernorm.": ".mlp.linear_fc1.layer_norm_",  # dense layers (MoE keeps its norm)
    ".self_attention.q_layernorm.": ".self_attention.linear_q_up_proj.layer_norm_",  # MLA
    ".self_attention.kv_layernorm.": ".self_attention.linear_kv_up_proj.layer_norm_",  # MLA
}


def local_to_te(name: str, te_names) -> str:
    """`name`, a parameter or state key of a local spec model or layer, as the TE spec's calls it (where
    `te_names` has it)."""
    dotted = f".{name}"
    for old, new in LOCAL_TO_TE.items():
        if old in dotted and dotted.replace(old, new)[1:] in te_names:
            return dotted.replace(old, new)[1:]
    return name


def _run_te_spec(torch, device, dtype):
    """Transformer Engine's layer spec without TE (te-spec-torch): a Qwen3-style layer (GQA, QK norm,
    SwiGLU, RMSNorm) built with get_gpt_layer_with_transformer_engine_spec and with the local spec from
    the same weights. Each module standing for a TE module must have TE_PARAMETERS' names (else the
    check fails naming them); then forward and the input gradient against the local spec's layer."""
    import dataclasses

    from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                           get_gpt_layer_with_transformer_engine_spec)
    from megatron.core.transformer.spec_utils import build_module

    heads, groups, head_dim, seq, batch = 8, 2, 32, 64, 2
    config = _config(torch, hidden_size=heads * head_dim, num_attention_heads=heads, num_query_groups=groups,
                     ffn_hidden_size=512, normalization="RMSNorm", qk_layernorm=True, gated_linear_unit=True,
                     activation_func=torch.nn.functional.silu, add_bias_linear=False, persist_layer_norm=False,
                     bias_activation_fusion=False, masked_softmax_fusion=False, gradient_accumulation_fusion=False,
                     apply_rope_fusion=False, hidden_dropout=0.0, attention_dropout=0.0, use_cpu_initialization=True,
                     params_dtype=dtype, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16)
    te_layer = build_module(get_gpt_layer_with_transformer_engine_spec(qk_layernorm=True), config=config,
                            layer_number=1).to(device)
    local_layer = build_module(get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm"),
                               config=dataclasses.replace(config, transformer_impl="local"), layer_number=1).to(device)
    for path, module in te_layer.named_modules():
        te_module = getattr(type(module), "te_module", None)
        if te_module is None:
            continue
        names = [name for name, _ in module.named_parameters(recurse=False)]
        expected = te_parameter_names(te_module, config.normalization, config.add_bias_linear)
        if names != expected or "_extra_state" not in module.state_dict():
            raise OutOfTolerance(f"{path} ({te_module}): parameters {names}, Transformer Engine's {expected} "
                                 f"and _extra_state")
    te_params = dict(te_layer.named_parameters())
    with torch.no_grad():
        for name, param in local_layer.named_parameters():
            te_params[local_to_te(name, te_params)].copy_(param)
    generator = torch.Generator().manual_seed(13)
    x = torch.randn(seq, batch, config.hidden_size, generator=generator).to(device=device, dtype=dtype)
    grad = torch.randn(seq, batch, config.hidden_size, generator=generator).to(device=device, dtype=dtype)
    results = []
    for layer in (te_layer, local_layer):
        inp = x.clone().requires_grad_()
        out, _ = layer(inp, attention_mask=None)
        out.backward(grad)
        results.append((out, inp.grad))
    (out, dx), (ref, ref_dx) = results
    return [("forward", out, ref), ("backward input", dx, ref_dx)]


def _named(label: str, what: str) -> str:
    return f"{label} {what}" if label else what


def _softmax_checks(prefix: str, path: str, module: str, enums: str, variants: tuple[str, ...]) -> tuple[Check, ...]:
    return tuple(Check(_named(prefix, f"softmax {variant}"), path,
                       lambda t, d, x, v=variant: _run_softmax(t, module, enums, v, d, x)) for variant in variants)


def _norm_checks(prefix: str, path: str, build: Callable) -> tuple[Check, ...]:
    return tuple(Check(_named(prefix, f"LayerNorm{' zero-centered' if zero else ''}"), path,
                       lambda t, d, x, z=zero: _run_norm(t, build(t, z), z, False, d, x)) for zero in (False, True))


def _optimizer_checks(prefix: str, path: str, module: str) -> tuple[Check, ...]:
    return tuple(Check(_named(prefix, f"optimizer {kind} step"), path,
                       lambda t, d, x, k=kind: _run_optimizer(t, module, k, d, x),
                       dtypes=("float32",)) for kind in ("Adam", "SGD"))


REGISTRY: dict[str, tuple[Check, ...]] = {
    "core-softmax": _softmax_checks("core", CORE_SOFTMAX, "megatron.core.fusions.fused_softmax",
                                    "megatron.core.transformer.enums", SOFTMAX_VARIANTS),
    "core-layernorm": _norm_checks("core", CORE_NORM, lambda t, z: _core_norm(t, "LayerNorm", z)),
    "core-rmsnorm": (Check("core RMSNorm", CORE_NORM,
                           lambda t, d, x: _run_norm(t, _core_norm(t, "RMSNorm", False), False, True, d, x)),),
    "rope": (Check("RoPE apply", ROPE, _run_rope_apply),
             Check("RoPE frequencies", ROPE, _run_rope_embedding, dtypes=("float32",))),
    "core-optimizer": _optimizer_checks("core", CORE_OPTIMIZER, "megatron.core.optimizer"),
    "grad-accum-fusion": tuple(Check(f"grad-accum fusion {api}", TENSOR_PARALLEL_LAYERS,
                                     lambda t, d, x, a=api: _run_grad_accum_linear(t, a, d, x))
                               for api in ("ColumnParallelLinear", "linear_with_grad_accumulation")),
    "core-grad-norm-clipping": (Check("core grad-norm clipping", CORE_CLIP, _run_core_clip, dtypes=("float32",)),),
    "core-torch-norm": tuple(Check(f"core torch {kind}", TORCH_NORM, lambda t, d, x, k=kind: _run_norm(t, _torch_norm(t, k), False, k == "RMSNorm", d, x))
                             for kind in ("LayerNorm", "RMSNorm")),
    "core-attention": tuple(Check(f"core attention {variant}", CORE_ATTENTION, lambda t, d, x, v=variant: _run_core_attention(t, v, d, x))
                            for variant in ("causal", "padding")),
    "core-attention-kernels": tuple(
        Check(f"attention kernels {shape[0]} {variant}", CORE_ATTENTION,
              lambda t, d, x, s=shape, v=variant: _run_attention_kernels(t, s, v, d, x), dtypes=("bfloat16",))
        for shape in RECIPE_ATTENTION_SHAPES for variant in ("causal", "documents")),
    "core-grouped-gemm": tuple(
        Check(f"grouped GEMM {shape[0]} experts", GROUPED_EXPERTS, lambda t, d, x, s=shape: _run_grouped_gemm(t, s, d, x),
              dtypes=("bfloat16", "float32"))
        for shape in RECIPE_EXPERT_SHAPES),
    "core-fp8-gemm": (Check("FP8 GEMM (tensorwise, hybrid)", FP8_LINEAR, _run_fp8_gemm, dtypes=("bfloat16",)),),
    "core-te-spec": (Check("TE layer spec without TE", TE_SPEC_LAYERS, _run_te_spec),),
}


# --- kinds: checks whose module a release's tree decides -------------------------------------
# release.yaml's smoke.ops entry {name, kind, module, path?, label?, ...}: the code is here, the module
# (a legacy layout's megatron/model, megatron/optimizer, ...) is the release's data. `path` is the
# module's file in the tree (default: the module's dotted name as a .py file).


@dataclass(frozen=True)
class Kind:
    build: Callable[[dict], tuple[Check, ...]]  # (the entry, with `path` filled in) -> its checks
    description: str
    enums: bool = False  # whether the entry names the module of its AttnMaskType enum (`enums:`)
    variants: tuple[str, ...] = ()  # the variants an entry may choose among (`variants:`)


KINDS: dict[str, Kind] = {
    "softmax": Kind(lambda e: _softmax_checks(e["label"], e["path"], e["module"], e["enums"], tuple(e["variants"])),
                    "FusedScaleMaskSoftmax of `module`, with AttnMaskType from `enums`", enums=True,
                    variants=SOFTMAX_VARIANTS),
    "mixed-fused-layernorm": Kind(lambda e: _norm_checks(e["label"], e["path"], lambda t, z: _mixed_fused_norm(e["module"], z)),
                                  "MixedFusedLayerNorm of `module`"),
    "optimizer": Kind(lambda e: _optimizer_checks(e["label"], e["path"], e["module"]), "Adam and SGD of `module`"),
    "clip-grad-norm": Kind(lambda e: (Check(_named(e["label"], "grad-norm clipping"), e["path"],
                                            lambda t, d, x: _run_clip(t, e["module"], d, x), dtypes=("float32",)),),
                           "clip_grad_norm_fp32(parameters, grads, max_norm, ...) of `module`"),
}


def module_file(module: str) -> str:
    """A module's file in the tree, by default: its dotted name as a .py file."""
    return module.replace(".", "/") + ".py"


def checks(ops) -> list[Check]:
    """The checks of a smoke profile's ops, in that order: REGISTRY names and KINDS entries."""
    found: list[Check] = []
    for op in ops:
        if isinstance(op, str):
            found += REGISTRY[op]
        else:
            found += KINDS[op["kind"]].build({"label": "", **op, "path": op.get("path") or module_file(op["module"])})
    return found
