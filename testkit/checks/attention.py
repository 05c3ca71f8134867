"""Child side of test_sdpa_causal.py: DotProductAttention's SDPA path against its explicit path.

Runs in a fresh process (testkit/child.py) with the patched tree first on
sys.path. CPU only. Three stand-ins, each for something this CPU process cannot have:
- megatron/core/transformer/moe/ops/paged_stash.py imports triton unguarded at the top; when triton
  is absent and the tree still does so, a stub of that one kernel module goes into sys.modules (no
  triton stub, so every guarded `import triton` still sees no triton). Temporary: the series' import
  patch makes that import optional, and the stub is then never installed.
- the model-parallel RNG tracker forks the CUDA generator; CpuRngTracker keeps the same fork()
  contract (named seeded states, swapped in for the block and advanced by it) on the CPU generator.
- the explicit path takes its score buffer from the global memory buffer, which allocates on
  torch.cuda.current_device(), and its default causal mask from get_default_causal_mask, built on
  "cuda": CpuMemoryBuffer and cpu_causal_mask make the same tensors on the CPU.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

PAGED_STASH = "megatron.core.transformer.moe.ops.paged_stash"


def stub_unguarded_triton() -> bool:
    """Put a stand-in for the triton-only paged_stash kernels in sys.modules when needed."""
    try:
        if importlib.util.find_spec("triton") is not None:
            return False
    except ModuleNotFoundError:  # refused by the child runner: absent
        pass
    source = Path(importlib.util.find_spec("megatron").submodule_search_locations[0]) / "core/transformer/moe/ops/paged_stash.py"
    if not source.exists() or "\nimport triton\n" not in source.read_text():
        return False
    stub = types.ModuleType(PAGED_STASH)
    stub.GLOBAL_BLOCK_SIZE = 1024
    stub.paged_stash_copy_kernel = stub.paged_stash_pop_kernel = None
    sys.modules[PAGED_STASH] = stub
    return True


class CpuRngTracker:
    """The model-parallel tracker's fork() contract on the CPU generator."""

    def __init__(self):
        self.states = {}

    def add(self, name, seed):
        saved = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states[name] = torch.get_rng_state()
        torch.set_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        self.forks += 1
        saved = torch.get_rng_state()
        torch.set_rng_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = torch.get_rng_state()
            torch.set_rng_state(saved)

    forks = 0


def setup(workdir: Path, device: str = "cpu"):
    """One-rank gloo group and, on the CPU, the stand-ins above (bench/bench_attention.py runs
    this on a GPU too, with Megatron's own RNG tracker and memory buffer)."""
    global torch, F, DotProductAttention, TransformerConfig, AttnBackend, AttnMaskType, PGS, TRACKER, dpa_module
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{workdir / 'dist-store'}", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tensor_parallel import random as mp_random
    from megatron.core.transformer import dot_product_attention as dpa_module
    from megatron.core.transformer.enums import AttnBackend, AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.utils import GlobalMemoryBuffer

    DotProductAttention = dpa_module.DotProductAttention
    PGS = ProcessGroupCollection()
    PGS.tp = dist.group.WORLD
    if device != "cpu":
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        parallel_state._set_global_memory_buffer()
        model_parallel_cuda_manual_seed(1234, tp_rank=0, ep_rank=0, etp_rank=0)
        return

    class CpuMemoryBuffer(GlobalMemoryBuffer):
        def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
            return torch.empty(tensor_shape, dtype=dtype)

    parallel_state._GLOBAL_MEMORY_BUFFER = CpuMemoryBuffer()
    from megatron.core.fusions import fused_softmax

    def cpu_causal_mask(sq):
        return torch.triu(torch.ones(sq, sq), diagonal=1).bool()

    fused_softmax.get_default_causal_mask = cpu_causal_mask
    TRACKER = CpuRngTracker()
    TRACKER.add("model-parallel-rng", 1234)
    mp_random._CUDA_RNG_STATE_TRACKER = TRACKER
    mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def make(backend="auto", heads=4, groups=4, kv=16, mask_type=None, dtype=None, layer=1, dropout=0.0, **extra):
    cfg = {
        "num_layers": 4, "hidden_size": heads * kv, "num_attention_heads": heads, "num_query_groups": groups,
        "kv_channels": kv, "attention_dropout": dropout, "attention_backend": getattr(AttnBackend, backend),
        "bf16": dtype == "bf16", "params_dtype": torch.bfloat16 if dtype == "bf16" else torch.float32,
        **extra,
    }
    softmax_scale = cfg.pop("softmax_scale", None)
    module = DotProductAttention(
        TransformerConfig(**cfg), layer_number=layer, attn_mask_type=mask_type or AttnMaskType.causal,
        attention_type="self", softmax_scale=softmax_scale, pg_collection=PGS,
    )
    return module


def inputs(sq, sk, b, heads, groups, kv, dtype, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sq, b, heads, kv, generator=gen).to(device, dtype).requires_grad_()
    k = torch.randn(sk, b, groups, kv, generator=gen).to(device, dtype).requires_grad_()
    v = torch.randn(sk, b, groups, kv, generator=gen).to(device, dtype).requires_grad_()
    return q, k, v


def run_both(case, mask=None, sq=32, sk=None, b=2, heads=4, groups=4, kv=16, dtype=None, **kw):
    """Forward and backward of the SDPA module and the explicit one on one input: max differences."""
    sk = sk or sq
    tdtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    outs = []
    for backend in ("auto", "unfused"):
        module = make(backend, heads=heads, groups=groups, kv=kv, dtype=dtype, **kw)
        module.train()
        q, k, v = inputs(sq, sk, b, heads, groups, kv, tdtype)
        out = module(q, k, v, mask)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(tdtype)
        out.backward(grad)
        outs.append((module.use_sdpa, out.detach().float(), [t.grad.float() for t in (q, k, v)]))
    (sdpa_used, o1, g1), (explicit_sdpa, o2, g2) = outs
    assert o1.shape == (sq, b, heads * kv), o1.shape
    return {
        "case": case, "sdpa_used": sdpa_used, "explicit_used_sdpa": explicit_sdpa,
        "out": (o1 - o2).abs().max().item(), "grad": max((a - c).abs().max().item() for a, c in zip(g1, g2)),
        "out_scale": o2.abs().max().item(), "grad_scale": max(g.abs().max().item() for g in g2),
        "finite": bool(torch.isfinite(o1).all() and all(torch.isfinite(g).all() for g in g1)),
    }


def padding_mask(b, sq, sk, lengths):
    """Megatron's boolean mask [b, 1, sq, sk], True = masked out: padded queries and keys."""
    mask = torch.zeros(b, 1, sq, sk, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :, n:, :] = True
        mask[i, :, :, n:] = True
    return mask


def dataloader_mask(b, s, eod_at=(), reset=False):
    """pretrain_gpt.py's attention mask as its dataset builds it (GPTDataset's
    _get_ltor_masks_and_position_ids, create_attention_mask_in_dataloader) and the default collate
    stacks it: [b, 1, s, s], True = masked out. eod_at: where each sample's documents end."""
    from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids

    masks = []
    for _ in range(b):
        tokens = torch.ones(s, dtype=torch.long)
        tokens[list(eod_at)] = 0
        mask, _, _ = _get_ltor_masks_and_position_ids(tokens, 0, False, reset, False, True)
        masks.append(mask)
    return torch.stack(masks)


def compare():
    AMT = AttnMaskType
    causal = torch.triu(torch.ones(32, 32, dtype=torch.bool), diagonal=1)[None, None]
    pad = padding_mask(2, 32, 32, [32, 20])
    cross = padding_mask(2, 24, 40, [24, 40]) | padding_mask(2, 24, 40, [24, 15])
    documents = dataloader_mask(2, 32, eod_at=(9, 20), reset=True)
    results = [
        run_both("causal fp32", None),
        run_both("causal mask given fp32", causal.expand(2, 1, 32, 32)),
        run_both("causal dataloader mask fp32", dataloader_mask(2, 32)),
        run_both("gqa causal dataloader mask fp32", dataloader_mask(2, 32), heads=8, groups=2, kv=8),
        run_both("documents (--reset-attention-mask) fp32", documents),
        run_both("gqa documents (--reset-attention-mask) bf16", documents, heads=8, groups=2, kv=8, dtype="bf16"),
        run_both("causal+padding fp32", causal | pad),
        run_both("padding fp32 (fully masked rows)", pad, mask_type=AMT.padding),
        run_both("gqa causal fp32", None, heads=8, groups=2, kv=8),
        run_both("gqa padding fp32", pad, heads=8, groups=2, kv=8, mask_type=AMT.padding),
        run_both("cross sq!=sk padding fp32", cross, sq=24, sk=40, mask_type=AMT.padding),
        run_both("no mask, no_mask type", None, mask_type=AMT.no_mask),
        run_both("decode sq=1 causal", None, sq=1, sk=32),
        run_both("scale+layer scaling fp32", None, layer=3, softmax_scale=0.05, apply_query_key_layer_scaling=True),
        run_both("layer scaling fp32", pad, layer=4, apply_query_key_layer_scaling=True, mask_type=AMT.padding),
        run_both("causal bf16", None, dtype="bf16"),
        run_both("gqa causal+padding bf16", causal | pad, heads=8, groups=2, kv=8, dtype="bf16"),
    ]
    return results


class RecordedSdpa:
    """What reaches torch.nn.functional.scaled_dot_product_attention inside the block: one dict
    per call (is_causal, attn_mask shape or None, enable_gqa, query and key heads)."""

    def __enter__(self):
        self.calls, self.real = [], F.scaled_dot_product_attention

        def record(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
            self.calls.append({"is_causal": is_causal, "attn_mask": None if attn_mask is None else list(attn_mask.shape),
                               "enable_gqa": kw.get("enable_gqa", False), "q_heads": query.size(1), "k_heads": key.size(1)})
            return self.real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)

        torch.nn.functional.scaled_dot_product_attention = record
        return self

    def __exit__(self, *exc):
        torch.nn.functional.scaled_dot_product_attention = self.real


def calls():
    """The SDPA call each kind of mask makes (GQA: 8 query heads, 2 key/value groups), and how often
    a given mask is compared with the causal one."""
    s, b = 32, 2
    gqa = dict(heads=8, groups=2, kv=8)
    cases = {
        "causal, no mask": (None, {}),
        "causal, dataloader mask": (dataloader_mask(b, s), {}),
        "causal, --reset-attention-mask": (dataloader_mask(b, s, eod_at=(9, 20), reset=True), {}),
        "padding type, causal-looking mask": (dataloader_mask(b, s), {"mask_type": AttnMaskType.padding}),
    }
    result = {}
    for name, (mask, kw) in cases.items():
        module = make(**gqa, **kw)
        q, k, v = inputs(s, s, b, 8, 2, 8, torch.float32)
        with RecordedSdpa() as rec:
            module(q, k, v, mask)
        result[name] = rec.calls

    # One mask through four layers: compared once; changed in place: compared again.
    mask = dataloader_mask(b, s)
    layers = [make(**gqa, layer=n) for n in range(1, 5)]
    compared = []
    real_equal = torch.equal

    def counting_equal(a, c):
        compared.append(1)
        return real_equal(a, c)

    torch.equal = counting_equal
    try:
        with RecordedSdpa() as rec:
            for layer in layers:
                layer(*inputs(s, s, b, 8, 2, 8, torch.float32), mask)
            first = len(compared)
            mask[:, :, 20, :5] = True  # no longer the plain causal mask (as a document end at 4)
            layers[0](*inputs(s, s, b, 8, 2, 8, torch.float32), mask)
    finally:
        torch.equal = real_equal
    result["four layers, one mask"] = {"compared": first, "compared_after_change": len(compared) - first,
                                       "causal_calls": [c["is_causal"] for c in rec.calls]}
    return result


def scale_reference():
    """softmax_scale x layer coefficient: the SDPA module against softmax(q k^T * softmax_scale) v."""
    module = make("auto", layer=3, softmax_scale=0.05, apply_query_key_layer_scaling=True, mask_type=AttnMaskType.no_mask)
    q, k, v = inputs(16, 16, 1, 4, 4, 16, torch.float32)
    out = module(q, k, v, None).detach()
    probs = torch.softmax(torch.einsum("sbhd,tbhd->bhst", q, k) * 0.05, dim=-1)
    ref = torch.einsum("bhst,tbhd->sbhd", probs, v).reshape(16, 1, 64)
    return {"use_sdpa": module.use_sdpa, "diff": (out - ref).abs().max().item()}


def dropout():
    """Dropout under the tracker: same tracker seed -> same output, the expected keep rate, the
    default generator untouched. q = k = 0 gives uniform probabilities 1/s and v = identity
    reads them back: out[i, j] is 0 (dropped) or 1 / (s (1 - p))."""
    s, p = 64, 0.3
    module = make("auto", heads=2, groups=2, kv=s, dropout=p, mask_type=AttnMaskType.no_mask)
    module.train()
    q = torch.zeros(s, 4, 2, s)
    v = torch.eye(s)[:, None, None, :].expand(s, 4, 2, s).contiguous()

    def once(seed):
        TRACKER.add("model-parallel-rng", seed)
        forks = TRACKER.forks
        before = torch.get_rng_state()
        out = module(q, q, v, None).view(s, 4, 2, s)
        return out, TRACKER.forks - forks, bool(torch.equal(before, torch.get_rng_state()))

    a, forks, default_untouched = once(11)
    b, _, _ = once(11)
    c, _, _ = once(12)
    kept = (a != 0).float().mean().item()
    values = a[a != 0]
    module.eval()
    evaluated = module(q, q, v, None).view(s, 4, 2, s)
    return {
        "use_sdpa": module.use_sdpa, "forks": forks, "default_untouched": default_untouched,
        "same_seed_equal": bool(torch.equal(a, b)), "other_seed_differs": not torch.equal(a, c),
        "keep_rate": kept, "expected_keep": 1 - p,
        "kept_value_err": (values - 1 / (s * (1 - p))).abs().max().item(),
        "eval_no_dropout_err": (evaluated - 1 / s).abs().max().item(),
    }


def selection():
    """Which backend gets which path, and the one-line fallback notes."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger(dpa_module.__name__).addHandler(Keep())
    chosen = {name: make(name).use_sdpa for name in ("auto", "flash", "fused", "local", "unfused")}
    windowed = [make("auto", window_size=(8, 0), layer=n).use_sdpa for n in (1, 2)]
    skipped = make("auto", window_size=(8, 0), window_attn_skip_freq=2, layer=2).use_sdpa
    deterministic = make("auto", deterministic_mode=True).use_sdpa
    unfused_windowed = make("unfused", window_size=(8, 0)).use_sdpa
    cfg = make("auto").config
    from megatron.core.transformer import sdpa_attention

    offsets = {t: sdpa_attention.unsupported(type(cfg)(**{**_fields(cfg), "softmax_type": t}), None) for t in ("off-by-one", "learnable")}
    return {
        "chosen": chosen, "windowed": windowed, "skipped_layer_sdpa": skipped, "deterministic": deterministic,
        "unfused_windowed": unfused_windowed, "offsets": {k: list(v) if v else None for k, v in offsets.items()},
        "records": records,
    }


def _fields(cfg):
    import dataclasses
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.init}


def run(group: str) -> dict:
    workdir = Path(os.getcwd())
    stubbed = stub_unguarded_triton()
    setup(workdir)
    result = {"stubbed_paged_stash": stubbed}
    for name in group.split(","):
        result[name] = globals()[name]()
    return result
