"""Checks of the series' part 1 (softmax, NCCL options, imports, argument validation), run by
child.py in a child process whose first sys.path entry is a Megatron tree:

    core          softmax parity and get_nccl_options on a megatron/core tree
    core-kernels  the same functions with stand-in *_cuda extensions present
    full          imports of the training path, then argument validation, on a whole tree

Each group returns one JSON-able dict of results; the tests assert on it.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import traceback
import types
import warnings


from rocmpatch.smoke.profile import load_profile
from testkit.harness import release_of

# The training path, as `rocmpatch smoke` imports it (this release's smoke profile), and the
# megatron-core GPT model.
_PROFILE = load_profile(release_of(__file__).series_dir)
FULL_TREE_MODULES = [*_PROFILE.full_imports, "megatron.core.models.gpt"]


def error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# --- softmax -------------------------------------------------------------------------------

def softmax_reference(x, scale, kind, mask):
    """fp32 reference of the kernels: scaled, causal excluded / padding at -10000, fully masked
    rows zero."""
    import torch

    scores = x.float() * scale
    if kind == "causal":
        sq, sk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(mask, -10000.0)
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        probs = probs.masked_fill(mask.all(dim=-1, keepdim=True), 0.0)
    return probs


def compare(run, x, scale, kind, mask):
    """Forward and backward of run(x) against the fp32 reference; relative max errors."""
    import torch

    x = x.detach().requires_grad_()
    y = run(x)
    grad = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    y.backward(grad)
    x_ref = x.detach().float().requires_grad_()
    y_ref = softmax_reference(x_ref.view(y.shape), scale, kind, mask)
    y_ref.backward(grad.float())
    return {
        "forward_err": (y.float() - y_ref).abs().max().item(),
        "backward_err": ((x.grad.float() - x_ref.grad).abs().max() / x_ref.grad.abs().max()).item(),
        "out_dtype_ok": y.dtype == x.dtype and x.grad.dtype == x.dtype,
        "shape_ok": y.shape == x.shape and x.grad.shape == x.shape,
    }


def softmax_cases():
    import torch
    from megatron.core.fusions import fused_softmax as fs
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    b, np_, sq, sk, scale = 2, 4, 32, 32, 0.3
    gen = torch.Generator().manual_seed(0)
    padding = torch.rand(b, 1, sq, sk, generator=gen) < 0.3
    padding[0, 0, 3, :] = True  # a fully masked row: the kernels output zeros there
    results = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = (torch.randn(b, np_, sq, sk, generator=gen) * 3).to(dtype)
        tag = str(dtype).replace("torch.", "")
        results[f"ScaledUpperTriangMaskedSoftmax-{tag}"] = compare(
            lambda t: fs.ScaledUpperTriangMaskedSoftmax.apply(t.view(-1, sq, sk), scale).view(b, np_, sq, sk),
            x, scale, "causal", None)
        results[f"ScaledMaskedSoftmax-{tag}"] = compare(
            lambda t: fs.ScaledMaskedSoftmax.apply(t, padding, scale), x, scale, "padding", padding)
        results[f"ScaledSoftmax-{tag}"] = compare(
            lambda t: fs.ScaledSoftmax.apply(t, scale), x, scale, "none", None)
        if dtype == torch.float32:
            continue
        for mask_type in (AttnMaskType.causal, AttnMaskType.padding):
            module = fs.FusedScaleMaskSoftmax(
                input_in_fp16=dtype == torch.float16,
                input_in_bf16=dtype == torch.bfloat16,
                attn_mask_type=mask_type,
                scaled_masked_softmax_fusion=True,
                mask_func=attention_mask_func,
                softmax_in_fp32=True,
                scale=scale,
            )
            mask = padding if mask_type == AttnMaskType.padding else None
            case = compare(lambda t: module(t, mask), x, scale, mask_type.name, mask)
            case["fused_path"] = module.is_kernel_available(mask, b, np_, sq, sk)
            results[f"FusedScaleMaskSoftmax-{mask_type.name}-{tag}"] = case
    results["get_batch_per_block"] = [
        fs.FusedScaleMaskSoftmax.get_batch_per_block(sq, k, b, np_) for k in (16, 32, 64, 128, 256, 4096)
    ]
    return results


# --- get_nccl_options ----------------------------------------------------------------------

def nccl_cases():
    import torch.distributed as dist
    from megatron.core import parallel_state

    cfgs = {"dp": {"max_ctas": 8}}
    results = {}
    saved = getattr(dist, "ProcessGroupNCCL", None)
    try:
        if hasattr(dist, "ProcessGroupNCCL"):
            del dist.ProcessGroupNCCL
        results["no_process_group_nccl"] = repr(parallel_state.get_nccl_options("dp", cfgs))

        class NoConfig:
            class Options:
                pass

        dist.ProcessGroupNCCL = NoConfig
        results["no_config"] = repr(parallel_state.get_nccl_options("dp", cfgs))

        class PartialConfig:  # like a build without cga_cluster_size
            class Options:
                def __init__(self):
                    self.config = types.SimpleNamespace(max_ctas=0, min_ctas=0)

        dist.ProcessGroupNCCL = PartialConfig
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            options = parallel_state.get_nccl_options("dp", cfgs)
        results["partial_config"] = vars(options.config)
        results["partial_config_warnings"] = [str(w.message) for w in caught]
        results["not_configured"] = repr(parallel_state.get_nccl_options("tp", cfgs))
    except BaseException as exc:
        results["error"] = error(exc)
    finally:
        if saved is not None:
            dist.ProcessGroupNCCL = saved
        elif hasattr(dist, "ProcessGroupNCCL"):
            del dist.ProcessGroupNCCL
    return results


# --- stand-in extensions -------------------------------------------------------------------

FAKE_KERNEL = '''
import torch
CALLS = []
def forward(*args):
    CALLS.append("forward")
    return torch.full_like(args[0], 0.5)
def backward(output_grads, softmax_results, scale):
    CALLS.append("backward")
    return torch.full_like(output_grads, 0.25)
def get_batch_per_block(sq, sk, b, np):
    CALLS.append("get_batch_per_block")
    return 7
'''


def kernel_cases():
    import torch

    fake_dir = tempfile.mkdtemp()
    names = ["scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda", "scaled_softmax_cuda"]
    for name in names:
        with open(os.path.join(fake_dir, name + ".py"), "w") as f:
            f.write(FAKE_KERNEL)
    sys.path.insert(0, fake_dir)
    from megatron.core.fusions import fused_softmax as fs

    x = torch.randn(2, 4, 8, 8, dtype=torch.float16, requires_grad=True)
    mask = torch.zeros(2, 1, 8, 8, dtype=torch.bool)
    outputs = {
        "scaled_upper_triang_masked_softmax_cuda": fs.ScaledUpperTriangMaskedSoftmax.apply(x.view(-1, 8, 8), 1.0),
        "scaled_masked_softmax_cuda": fs.ScaledMaskedSoftmax.apply(x, mask, 1.0),
        "scaled_softmax_cuda": fs.ScaledSoftmax.apply(x, 1.0),
    }
    results = {}
    for name, y in outputs.items():
        x.grad = None
        y.backward(torch.ones_like(y))
        results[name] = {
            "calls": importlib.import_module(name).CALLS[:],
            "forward_from_kernel": bool((y == 0.5).all()),
            "backward_from_kernel": bool((x.grad == 0.25).all()),
        }
    results["get_batch_per_block"] = fs.FusedScaleMaskSoftmax.get_batch_per_block(32, 32, 2, 4)
    return results


# --- full tree -----------------------------------------------------------------------------

def full_tree_cases():
    results = {"imports": {}}
    for module in FULL_TREE_MODULES:
        try:
            importlib.import_module(module)
            results["imports"][module] = "ok"
        except BaseException as exc:
            results["imports"][module] = error(exc)
    try:
        results["args"] = validate_gpt_args()
    except BaseException as exc:
        results["args"] = {"error": error(exc), "traceback": traceback.format_exc()[-2000:]}
    try:
        results["legacy_softmax"] = legacy_softmax_forward()
    except BaseException as exc:
        results["legacy_softmax"] = {"error": error(exc)}
    try:
        results["initialize"] = initialize_steps()
    except BaseException as exc:
        results["initialize"] = {"error": error(exc)}
    return results


def initialize_steps():
    """fused_kernels.load as _compile_dependencies calls it, and set_jit_fusion_options' flags."""
    import torch
    from megatron import fused_kernels, initialize

    fused_kernels.load(types.SimpleNamespace(rank=0))
    initialize._warmup_jit_function = lambda: None  # needs a GPU and global args
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        initialize.set_jit_fusion_options()
    return {
        "fused_kernels_load": "ok",
        "texpr_fuser_enabled": torch._C._jit_texpr_fuser_enabled(),
        "nvfuser_warnings": [str(w.message) for w in caught if "nvfuser" in str(w.message)],
    }


def validate_gpt_args():
    """parse_args + validate_args as pretrain_gpt.py runs them: GPT defaults, a tiny model,
    world size 1, --distributed-backend rccl and bf16 (async all-reduce on by default)."""
    import contextlib
    import io

    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update(RANK="0", WORLD_SIZE="1")
    sys.argv = [
        "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "2",
        "--global-batch-size", "4", "--lr", "1e-4", "--train-iters", "10", "--bf16",
        "--distributed-backend", "rccl", "--vocab-file", "vocab.json", "--merge-file", "merges.txt",
    ]
    from megatron.arguments import parse_args, validate_args

    with contextlib.redirect_stdout(io.StringIO()):
        args = parse_args()
        validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
    return {
        "distributed_backend": args.distributed_backend,
        "tokenizer_type": args.tokenizer_type,
        "world_size": args.world_size,
        "data_parallel_size": args.data_parallel_size,
        "params_dtype": str(args.params_dtype),
    }


def legacy_softmax_forward():
    """The legacy model's default bf16 softmax (fusion on, kernel-sized) on CPU."""
    import torch
    from megatron.model.enums import AttnMaskType
    from megatron.model.fused_softmax import FusedScaleMaskSoftmax
    from megatron.model.utils import attention_mask_func

    module = FusedScaleMaskSoftmax(False, True, AttnMaskType.causal, True, attention_mask_func, True, None)
    x = torch.randn(2, 4, 32, 32, dtype=torch.bfloat16)
    causal = torch.ones(1, 1, 32, 32, dtype=torch.bool).triu(1)
    y = module(x, causal)
    expected = torch.softmax(x.float().masked_fill(causal, float("-inf")), dim=-1)
    return {
        "fused_path": module.is_kernel_available(causal, 2, 4, 32, 32),
        "dtype": str(y.dtype),
        "forward_err": (y.float() - expected).abs().max().item(),
    }


GROUPS = {
    "core": lambda: {"softmax": softmax_cases(), "nccl": nccl_cases()},
    "core-kernels": kernel_cases,
    "full": full_tree_cases,
}


def run(group: str) -> dict:
    return GROUPS[group]()
