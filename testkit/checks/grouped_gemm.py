"""Child side of test_grouped_gemm.py: the MoE experts of --moe-grouped-gemm without Transformer
Engine (TorchGroupedMLP: torch's grouped GEMM) against SequentialMLP, in a fresh process on the
patched tree (testkit/child.py), CPU, one gloo rank. Returns plain values; the parent asserts.
Groups:
- exact: both built from one seed (same weights), one forward and backward with empty experts among
  the others, in float32 and bfloat16, with SwiGLU, with GeLU; the largest output and gradient differences;
- recompute: --recompute-modules moe_act on and off from one seed: output and gradients, and the
  bytes the autograd graph holds after the forward; what is still refused (FP8, offloading);
- kernel: which path ran and what it said (the log records of the grouped module);
- layer: the local GPT layer spec with and without moe_grouped_gemm: which experts class it builds;
- state_dict: TorchGroupedMLP's state dict and sharded state dict (keys, shapes, global offsets),
  with SequentialMLP's sharded state dict beside it;
- checkpoint: torch_dist save with one class and load into the other, both ways.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
from pathlib import Path

from testkit.checks import gloo

HIDDEN, FFN, EXPERTS = 32, 48, 4
TOKENS_PER_EXPERT = [5, 0, 9, 0]  # experts 1 and 3 get nothing


def setup(workdir: Path) -> None:
    global torch
    import torch

    from megatron.core import parallel_state

    gloo.join(workdir)
    parallel_state.initialize_model_parallel(1, 1)


def config(**overrides):
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(num_layers=1, hidden_size=HIDDEN, ffn_hidden_size=FFN, moe_ffn_hidden_size=FFN,
                  num_attention_heads=4, num_moe_experts=EXPERTS, gated_linear_unit=True, activation_func=F.silu,
                  add_bias_linear=False, bias_activation_fusion=False, gradient_accumulation_fusion=False,
                  hidden_dropout=0.0, moe_router_topk=2)
    kwargs.update(overrides)
    dtype = kwargs.pop("dtype", torch.float32)
    return TransformerConfig(**kwargs, params_dtype=dtype, bf16=dtype == torch.bfloat16)


def build(kind: str, cfg, seed: int = 1234):
    """'grouped' (what LocalSpecProvider.grouped_mlp_modules(True) builds) or 'sequential'."""
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.moe.moe_utils import get_default_pg_collection

    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    provider = LocalSpecProvider()
    if "moe_use_legacy_grouped_gemm" in inspect.signature(provider.grouped_mlp_modules).parameters:
        # 0.15/0.16: (module, submodules), built with build_module's keywords
        module, submodules = provider.grouped_mlp_modules(kind == "grouped", False)
        builder = functools.partial(module, submodules=submodules)
    else:
        builder = provider.grouped_mlp_modules(kind == "grouped")
    return builder(cfg.num_moe_experts, cfg, pg_collection=get_default_pg_collection())


def sequential_name(name: str) -> str:
    """linear_fc1.weight2 -> local_experts.2.linear_fc1.weight."""
    linear, param = name.split(".")
    kind = param.rstrip("0123456789")
    return f"local_experts.{param[len(kind):]}.{linear}.{kind}"


def canonical(module) -> dict:
    """{SequentialMLP's parameter name: tensor} of either class."""
    return {(sequential_name(n) if n.startswith("linear_fc") else n): p for n, p in module.named_parameters()}


def experts_inputs(cfg, tokens_per_expert):
    generator = torch.Generator().manual_seed(7)
    total = sum(tokens_per_expert)
    hidden = torch.randn(total, cfg.hidden_size, generator=generator).to(cfg.params_dtype).requires_grad_()
    probs = torch.rand(total, generator=generator)
    return generator, hidden, probs


def run_experts(module, cfg, tokens_per_expert):
    generator, hidden, probs = experts_inputs(cfg, tokens_per_expert)
    output, _ = module(hidden, torch.tensor(tokens_per_expert), probs)
    grad = torch.randn(output.shape, generator=generator).to(output.dtype)
    output.backward(grad)
    grads = {name: p.grad.detach().float().clone() for name, p in module.named_parameters()}
    return output.detach().float(), hidden.grad.detach().float(), grads


def compare(tokens_per_expert=TOKENS_PER_EXPERT, **overrides) -> dict:
    cfg = config(**overrides)
    grouped, sequential = build("grouped", cfg), build("sequential", cfg)
    seq_params = dict(sequential.named_parameters())
    same_init = all(torch.equal(p, seq_params[sequential_name(n)]) for n, p in grouped.named_parameters())
    out_g, dx_g, grads_g = run_experts(grouped, cfg, tokens_per_expert)
    out_s, dx_s, grads_s = run_experts(sequential, cfg, tokens_per_expert)
    grad_diff = max((g - grads_s[sequential_name(n)]).abs().max().item() for n, g in grads_g.items())
    empty = [i for i, n in enumerate(tokens_per_expert) if n == 0]
    return {
        "class": type(grouped).__name__,
        "same_init": same_init,
        "out_diff": (out_g - out_s).abs().max().item() if out_g.numel() else 0.0,
        "out_scale": out_s.abs().max().item() if out_s.numel() else 0.0,
        "dx_diff": (dx_g - dx_s).abs().max().item() if dx_g.numel() else 0.0,
        "grad_diff": grad_diff,
        "grad_scale": max(g.abs().max().item() for g in grads_s.values()),
        "empty_expert_grads_zero": all(grads_g[f"linear_fc{k}.weight{i}"].abs().max().item() == 0
                                       for i in empty for k in (1, 2)),
    }


def exact() -> dict:
    import torch.nn.functional as F

    bf16 = torch.bfloat16
    return {
        "swiglu fp32": compare(),
        "swiglu bf16": compare(dtype=bf16),
        "swiglu fused bf16": compare(dtype=bf16, bias_activation_fusion=True),
        "gelu fp32": compare(gated_linear_unit=False, activation_func=F.gelu),
        "all empty bf16": compare(tokens_per_expert=[0] * EXPERTS, dtype=bf16),
        "one expert bf16": compare(tokens_per_expert=[0, 0, 0, 11], dtype=bf16),
    }


def held_after_forward(module, cfg, tokens_per_expert) -> int:
    """The bytes autograd holds after a forward (the distinct storages of the saved tensors but the
    parameters'): CheckpointWithoutOutput has freed the activation's output by then. A forward of
    its own: saved_tensors_hooks hand autograd new tensors, and 0.15's CheckpointWithoutOutput finds
    its inputs' gradients on the tensors ctx.saved_tensors gives."""
    _, hidden, probs = experts_inputs(cfg, tokens_per_expert)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        module(hidden, torch.tensor(tokens_per_expert), probs)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    for parameter in module.parameters():
        storages.pop(parameter.untyped_storage().data_ptr(), None)
    return sum(n for ptr, n in storages.items() if ptr)


def copy_storage(dst, src) -> None:
    """What 0.15/0.16's CheckpointWithoutOutput does to restore the recomputed output; 0.17+ makes
    dst's storage point at src's with a C++ extension compiled at the first recompute (torch
    load_inline, ~30 CPU s with g++), which the full-tree training runs."""
    dst.untyped_storage().resize_(src.untyped_storage().nbytes())
    dst.untyped_storage().copy_(src.untyped_storage())


def recompute_case(**overrides) -> dict:
    """--recompute-modules moe_act on and off, one seed: the grouped experts' output and gradients,
    and what the autograd graph holds after the forward."""
    cfg = config(moe_grouped_gemm=True, **overrides)
    run_experts(build("grouped", cfg), cfg, TOKENS_PER_EXPERT)  # the kernel's probe, outside the counts
    results, held = {}, []
    for on in (False, True):
        cfg = config(moe_grouped_gemm=True, **overrides,
                     **({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]} if on else {}))
        module = build("grouped", cfg)
        held.append(held_after_forward(module, cfg, TOKENS_PER_EXPERT))
        results[on] = (module.activation_recompute, *run_experts(module, cfg, TOKENS_PER_EXPERT))
    (flag_off, out_off, dx_off, grads_off), (flag_on, out_on, dx_on, grads_on) = results[False], results[True]
    return {
        "recompute": [flag_off, flag_on],
        "bitwise": torch.equal(out_on, out_off) and torch.equal(dx_on, dx_off)
        and all(torch.equal(g, grads_off[n]) for n, g in grads_on.items()),
        "held_bytes": held,
        # the activation's output: routed tokens x the expert's ffn size
        "activation_bytes": sum(TOKENS_PER_EXPERT) * cfg.moe_ffn_hidden_size * cfg.params_dtype.itemsize,
    }


def refusal(**overrides) -> str | None:
    """The error building the grouped experts with moe_act recompute and `overrides` (the config's
    own or the module's), or None."""
    try:
        build("grouped", config(moe_grouped_gemm=True, recompute_granularity="selective",
                                recompute_modules=["moe_act"], **overrides))
    except ValueError as error:
        return str(error)
    return None


def recompute() -> dict:
    import torch.nn.functional as F

    from megatron.core.tensor_parallel import random as tp_random
    from megatron.core.transformer.transformer_config import TransformerConfig

    if getattr(tp_random, "_share_storage_ext", False) is None:  # 0.17+: stand in for the C++ extension
        tp_random._share_storage_ext = type("CopyStorage", (), {"share_storage": staticmethod(copy_storage)})
    bf16 = torch.bfloat16
    offloading = "fine_grained_activation_offloading" in {f.name for f in dataclasses.fields(TransformerConfig)}
    return {
        "swiglu fp32": recompute_case(),
        "swiglu bf16": recompute_case(dtype=bf16),
        "swiglu fused bf16": recompute_case(dtype=bf16, bias_activation_fusion=True),
        "gelu fp32": recompute_case(gated_linear_unit=False, activation_func=F.gelu),
        "fp8 refused": refusal(fp8="hybrid", fp8_recipe="tensorwise", dtype=bf16),
        "offloading refused": refusal(fine_grained_activation_offloading=True, offload_modules=["moe_act"])
        if offloading else "no such option",
    }


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append([record.levelname, record.getMessage()])


def kernel() -> dict:
    """The grouped module's log records over several layers and dtypes, and its choices (the first
    group of its process: nothing said before)."""
    from megatron.core.transformer.moe import torch_grouped_mlp

    handler = Records()
    log = logging.getLogger(torch_grouped_mlp.__name__)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    for dtype in (torch.float32, torch.bfloat16, torch.float32, torch.bfloat16):
        cfg = config(dtype=dtype)
        run_experts(build("grouped", cfg), cfg, TOKENS_PER_EXPERT)
    odd = config(hidden_size=12, moe_ffn_hidden_size=20, ffn_hidden_size=20, dtype=torch.bfloat16)  # 24-byte rows
    odd_result = run_experts(build("grouped", odd), odd, TOKENS_PER_EXPERT)
    sequential = build("sequential", odd)
    # What the backward keeps: the input and the experts' own weights, no stacked copy of them.
    x = torch.randn(6, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    weights = [torch.randn(2 * FFN, HIDDEN, dtype=torch.bfloat16, requires_grad=True) for _ in range(EXPERTS)]
    kept = torch_grouped_mlp.grouped_linear(x, weights, [2, 0, 4, 0]).grad_fn.saved_tensors
    return {
        "saved_shapes": [list(t.shape) for t in kept],
        "records": handler.lines,
        "grouped_mm": torch_grouped_mlp.GROUPED_MM_NAME,
        "choices": {f"{dtype} {k}->{n}": chosen for (_, dtype, k, n), chosen in torch_grouped_mlp._KERNELS.items()},
        "odd_shape_diff": (odd_result[0] - run_experts(sequential, odd, TOKENS_PER_EXPERT)[0]).abs().max().item(),
    }


def layer() -> dict:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_layer import TransformerLayer

    result = {}
    for grouped in (True, False):
        cfg = config(moe_grouped_gemm=grouped, add_bias_linear=False)
        spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=grouped)
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        torch.manual_seed(3)
        model_parallel_cuda_manual_seed(3)
        built = TransformerLayer(cfg, spec.submodules)
        result[str(grouped)] = type(built.mlp.experts).__name__
    return result


def describe(sharded: dict) -> dict:
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    described = {}
    for local_key, item in sorted(sharded.items()):
        if isinstance(item, ShardedTensor):
            described[local_key] = {"key": item.key, "global_shape": list(item.global_shape),
                                    "global_offset": list(item.global_offset), "local_shape": list(item.local_shape)}
        elif isinstance(item, ShardedObject):
            described[local_key] = {"key": item.key, "global_shape": list(item.global_shape),
                                    "global_offset": list(item.global_offset), "object": True}
        else:  # a factory (SwiGLU's fc1 weight, split into its two halves)
            described[local_key] = {"key": item.key, "factory": type(item).__name__}
    return described


def state_dict() -> dict:
    result = {}
    for name, overrides in (("swiglu", {}), ("gelu bias", {"gated_linear_unit": False, "add_bias_linear": True})):
        cfg = config(**overrides)
        grouped, sequential = build("grouped", cfg), build("sequential", cfg)
        result[name] = {
            "state_dict": {k: list(v.shape) for k, v in grouped.state_dict().items()},
            "grouped": describe(grouped.sharded_state_dict(prefix="mlp.experts.")),
            "sequential": describe(sequential.sharded_state_dict(prefix="mlp.experts.")),
        }
    return result


def checkpoint() -> dict:
    from megatron.core import dist_checkpointing

    cfg = config()
    result = {}
    for source, target in (("grouped", "sequential"), ("sequential", "grouped")):
        saved = build(source, cfg, seed=11)
        directory = Path(os.getcwd()) / f"ckpt-{source}"
        directory.mkdir()
        dist_checkpointing.save(saved.sharded_state_dict(prefix="experts."), str(directory))
        loaded = build(target, cfg, seed=99)
        state = dist_checkpointing.load(loaded.sharded_state_dict(prefix="experts."), str(directory))
        missing, unexpected = loaded.load_state_dict({k.removeprefix("experts."): v for k, v in state.items()},
                                                     strict=True)
        saved_params, loaded_params = canonical(saved), canonical(loaded)
        equal = saved_params.keys() == loaded_params.keys() and all(
            torch.equal(p, saved_params[n]) for n, p in loaded_params.items())
        result[f"{source}->{target}"] = {"equal": equal, "missing": list(missing), "unexpected": list(unexpected),
                                         "params": len(loaded_params)}
    return result


def run(group: str) -> dict:
    setup(Path(os.getcwd()))
    return {name: globals()[name]() for name in group.split(",")}
