"""Child side of test_fp8.py: --fp8-format without Transformer Engine (patch fp8-tensorwise-local:
tensorwise dynamic scaling on torch._scaled_mm), in a fresh process on the patched tree
(testkit/child.py), CPU, gloo. Returns plain values; the parent asserts.
Groups:
- args: parse_args + validate_args for FP8 command lines: the error or the lines printed; a GPU
  without FP8 GEMMs (gfx90a, CUDA 8.0) and a torch build whose torch._scaled_mm fails, simulated;
- gemm: each GEMM (forward, grad-input, grad-weight) of TensorwiseFp8 against the same GEMM on the
  dequantized FP8 operands and against the BF16 matmul, with token counts that need padding;
  every torch._scaled_mm call's operand dtypes;
- formats: the formats device_formats picks per device (gfx942, gfx950, gfx90a, CUDA 9.0 and 8.0
  simulated; the CPU real);
- block: a 4-layer TransformerBlock of the local spec under get_fp8_context (TE's per-layer
  contexts): which layers call torch._scaled_mm, with and without --first-last-layers-bf16, with
  full recompute, and nothing outside the block; recipes other than tensorwise refused by
  get_fp8_context;
- tp: one rank of a TP 2 + SP job (run_ranks): column- then row-parallel linear in FP8 against the
  same layers in BF16, forward and backward, and the _scaled_mm calls of this rank;
- te_spec: GPTModels of the Transformer Engine spec without TE (patch te-spec-torch: torch modules
  under TE's names), Llama- and DeepSeek-shaped (MLA, MTP; dense: MoE in FP8 is the moe group's),
  fp8 hybrid
  tensorwise: the torch._scaled_mm calls of each module's forward (the output layer's too) and of
  the backward; MLA's duplicated down projection (TorchTELinear) forward, grad-input and grad-weight
  against the GEMMs of their dequantized operands.
- moe: the torch grouped experts under FP8 (patch fp8-moe-grouped-local): each expert's forward,
  grad-input and grad-weight against the GEMMs of its dequantized operands, with an empty expert;
  TorchGroupedMLP built from an FP8 config (upstream's TE-version check passed by) against the
  same weights in BF16, its torch._scaled_mm calls and what it said; the sequential experts'
  config still refused by upstream's check.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import types
from pathlib import Path

from testkit.checks import gloo

BASE_ARGV = [
    "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
    "--train-iters", "2", "--lr", "1e-3", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
    "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--bf16", "--mock-data",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128", "--distributed-backend", "gloo",
]
TENSORWISE = ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
ARG_CASES = {
    "hybrid default recipe": ["--fp8-format", "hybrid"],
    "hybrid tensorwise": TENSORWISE,
    "e4m3 tensorwise": ["--fp8-format", "e4m3", "--fp8-recipe", "tensorwise"],
    "delayed": ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"],
    "mxfp8": ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"],
    "blockwise": ["--fp8-format", "e4m3", "--fp8-recipe", "blockwise"],
    "custom": ["--fp8-format", "e4m3", "--fp8-recipe", "custom"],
    "param gather": [*TENSORWISE, "--fp8-param-gather", "--use-distributed-optimizer"],
    "output proj": [*TENSORWISE, "--fp8-output-proj"],
    "selective mlp": [*TENSORWISE, "--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp"],
    "selective core_attn": [*TENSORWISE, "--recompute-granularity", "selective", "--recompute-modules", "core_attn"],
    "full recompute": [*TENSORWISE, "--recompute-granularity", "full", "--recompute-method", "uniform",
                       "--recompute-num-layers", "1"],
    "mtp full recompute": [*TENSORWISE, "--recompute-granularity", "full", "--recompute-method", "uniform",
                           "--recompute-num-layers", "1", "--mtp-num-layers", "1"],
    "grouped experts": [*TENSORWISE, "--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm"],
    "sequential experts": [*TENSORWISE, "--num-experts", "4", "--moe-router-topk", "2"],
    "router padding": [*TENSORWISE, "--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm",
                       "--moe-router-padding-for-fp8"],
    "moe_act recompute": [*TENSORWISE, "--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm",
                          "--recompute-granularity", "selective", "--recompute-modules", "moe_act"],
    "gfx90a": TENSORWISE,
    "sm80": TENSORWISE,
    "no fp8 gemm in build": TENSORWISE,
}
# The simulated devices: (torch.version.hip, gcnArchName, (major, minor)).
DEVICES = {"gfx942": ("6.4", "gfx942:sramecc+:xnack-", (9, 4)), "gfx950": ("7.0", "gfx950:sramecc+:xnack-", (9, 5)),
           "gfx90a": ("6.4", "gfx90a:sramecc+:xnack-", (9, 0)), "sm90": (None, "", (9, 0)),
           "sm80": (None, "", (8, 0))}


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def simulated_gpu(name: str):
    """torch.cuda as one GPU of DEVICES[name] shows it (properties only: nothing runs there)."""
    import torch

    hip, arch, (major, minor) = DEVICES[name]
    saved = (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.get_device_properties, torch.version.hip)
    torch.cuda.is_available, torch.cuda.device_count = (lambda: True), (lambda: 1)
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(gcnArchName=arch, major=major,
                                                                                 minor=minor)
    torch.version.hip = hip
    try:
        yield
    finally:
        torch.cuda.is_available, torch.cuda.device_count, torch.cuda.get_device_properties, torch.version.hip = saved


@contextlib.contextmanager
def recorded_scaled_mm(calls: list, fail: bool = False):
    """Record each torch._scaled_mm call's operand dtypes (or fail it, as a build without FP8 GEMMs)."""
    import torch

    real = torch._scaled_mm

    def scaled_mm(a, b, *args, **kwargs):
        calls.append([str(a.dtype).removeprefix("torch."), str(b.dtype).removeprefix("torch."), list(a.shape),
                      list(b.shape)])
        if fail:
            raise RuntimeError("_scaled_mm_out_cpu: no FP8 kernel in this build (simulated)")
        return real(a, b, *args, **kwargs)

    torch._scaled_mm = scaled_mm
    try:
        yield
    finally:
        torch._scaled_mm = real


def args() -> dict:
    from megatron.core.extensions import torch_fp8
    from megatron.training.arguments import parse_args, validate_args

    results = {}
    for name, extra in ARG_CASES.items():
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        sys.argv = BASE_ARGV + extra
        torch_fp8._FORMATS.clear()
        out, case, calls = io.StringIO(), {"error": None}, []
        device = simulated_gpu(name) if name in DEVICES else contextlib.nullcontext()
        with contextlib.redirect_stdout(out), device, recorded_scaled_mm(calls, fail=name == "no fp8 gemm in build"):
            try:
                args = parse_args()
                validate_args(args)
                case.update(fp8=args.fp8, fp8_recipe=args.fp8_recipe)
            except Exception as exc:  # noqa: BLE001 - the error is the result
                case["error"] = error_text(exc)
        case["lines"] = [line for line in out.getvalue().splitlines() if "FP8" in line or "fp8" in line]
        case["probe_calls"] = [call[:2] for call in calls]
        results[name] = case
    return results


def dequantized(data, scale):
    return data.float() * scale


def gemm() -> dict:
    """TensorwiseFp8's three GEMMs: err_dequant is against the same GEMM in fp32 on the dequantized
    FP8 operands (what the FP8 GEMM computes, up to its bf16 output); err_bf16 against the BF16
    matmul of the unquantized tensors (the FP8 rounding itself); each relative to the largest value."""
    import torch

    from megatron.core.extensions import torch_fp8

    result = {}
    generator = torch.Generator().manual_seed(5)
    for name, hybrid, tokens in (("e4m3", False, 96), ("hybrid", True, 96), ("hybrid, 37 tokens", True, 37)):
        recipe = torch_fp8.TensorwiseFp8(hybrid=hybrid)
        fwd, bwd = recipe.formats(torch.device("cpu"))
        x = torch.randn(tokens, 64, generator=generator).to(torch.bfloat16)
        w = (torch.randn(48, 64, generator=generator) * 0.02).to(torch.bfloat16)
        g = (torch.randn(tokens, 48, generator=generator) * 1e-3).to(torch.bfloat16)
        xq, wq, gq = torch_fp8.quantize(x, fwd), torch_fp8.quantize(w, fwd), torch_fp8.quantize(g, bwd)
        references = {
            "forward": (lambda: recipe.forward(x.view(tokens, 1, 64), w).view(tokens, 48),
                        dequantized(*xq) @ dequantized(*wq).t(), x.float() @ w.float().t()),
            "dgrad": (lambda: recipe.dgrad(g.view(tokens, 1, 48), w).view(tokens, 64),
                      dequantized(*gq) @ dequantized(*wq), g.float() @ w.float()),
            "wgrad": (lambda: recipe.wgrad(g, x), dequantized(*gq).t() @ dequantized(*xq), g.float().t() @ x.float()),
        }
        for gemm_name, (run, dequant_ref, bf16_ref) in references.items():
            calls = []
            with recorded_scaled_mm(calls):
                out = run()
            scale = bf16_ref.abs().max().item()
            result[f"{name} {gemm_name}"] = {
                "dtype": str(out.dtype), "shape": list(out.shape), "calls": [c[:2] for c in calls],
                "padded_rows": [c[2][0] for c in calls] if gemm_name != "wgrad" else [c[2][1] for c in calls],
                "err_dequant": (out.float() - dequant_ref).abs().max().item() / scale,
                "err_bf16": (out.float() - bf16_ref).abs().max().item() / scale,
            }
    # --no-fp8-wgrad: the grad-weight GEMM in the layer's dtype; a weight side off 16: its dtype, said once.
    calls = []
    with recorded_scaled_mm(calls):
        torch_fp8.TensorwiseFp8(hybrid=True, fp8_wgrad=False).wgrad(g, x)
        odd = torch.randn(40, 24).to(torch.bfloat16)
        torch_fp8.TensorwiseFp8(hybrid=True).forward(torch.randn(16, 24).to(torch.bfloat16), odd)
    result["bf16 paths calls"] = len(calls)
    zeros = torch_fp8.quantize(torch.zeros(16, 16), torch.float8_e4m3fn)
    result["zeros"] = {"finite_scale": bool(torch.isfinite(zeros[1]).item()), "all_zero": not zeros[0].float().any()}
    return result


def formats() -> dict:
    import torch

    from megatron.core.extensions import torch_fp8

    result = {"cpu": [str(d) for d in torch_fp8.device_formats(torch.device("cpu"))]}
    for name in DEVICES:
        with simulated_gpu(name):
            try:
                result[name] = [str(d) for d in torch_fp8.device_formats(torch.device("cuda", 0))]
            except torch_fp8.Fp8Unavailable as error:
                result[name] = error_text(error)
    return result


def setup(workdir: Path, tp: int = 1) -> None:
    from megatron.core import parallel_state

    gloo.join(workdir)
    parallel_state.initialize_model_parallel(tp, 1)


def block() -> dict:
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.fp8_utils import get_fp8_context
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_block import TransformerBlock
    from megatron.core.transformer.transformer_config import TransformerConfig

    setup(Path(os.getcwd()))
    result = {}

    def config(**overrides):
        kwargs = dict(num_layers=4, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, add_bias_linear=False,
                      gated_linear_unit=True, activation_func=torch.nn.functional.silu, bf16=True,
                      params_dtype=torch.bfloat16, hidden_dropout=0.0, attention_dropout=0.0, fp8="hybrid",
                      fp8_recipe="tensorwise", gradient_accumulation_fusion=False, bias_activation_fusion=False)
        kwargs.update(overrides)
        return TransformerConfig(**kwargs)

    full_recompute = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    for name, overrides in (("all layers", {}), ("first/last bf16", {"first_last_layers_bf16": True}),
                            ("bf16", {"fp8": None}), ("full recompute", full_recompute)):
        cfg = config(**overrides)
        torch.manual_seed(1)
        model_parallel_cuda_manual_seed(1)
        layers = TransformerBlock(cfg, get_gpt_layer_local_spec())
        layers.train()
        x = torch.randn(16, 2, 64, dtype=torch.bfloat16, requires_grad=True)
        calls, per_layer = [], []
        for layer in layers.layers:  # which layers' linears reach torch._scaled_mm
            layer.register_forward_pre_hook(lambda module, args: per_layer.append(len(calls)))
        with recorded_scaled_mm(calls):
            out = layers(x, attention_mask=None)
            forward_calls = len(calls)
            marks = [*per_layer, forward_calls]  # the forward's (a recompute calls the hooks again)
            out.float().sum().backward()
        result[name] = {
            "forward_calls_per_layer": [b - a for a, b in zip(marks, marks[1:])],
            "backward_calls": len(calls) - forward_calls,
            "dtypes": sorted({f"{a} x {b}" for a, b, *_ in calls}),
            "finite": bool(torch.isfinite(out).all() and torch.isfinite(x.grad).all()),
            "active_after": torch_fp8.active_recipe() is not None,
        }
    refused = {}
    for recipe in ("delayed", "mxfp8", "blockwise"):
        try:
            get_fp8_context(config(fp8_recipe=recipe), 1)
            refused[recipe] = None
        except torch_fp8.Fp8Unavailable as error:
            refused[recipe] = error_text(error)
    result["refused"] = refused
    return result


def tp() -> dict:
    """One rank of TP 2 + SP: ColumnParallelLinear (SP all-gather) -> RowParallelLinear
    (reduce-scatter), FP8 against BF16 with the same weights, forward and backward."""
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear, model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    setup(Path(os.getcwd()), tp=world)
    cfg = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, bf16=True, params_dtype=torch.bfloat16,
                            sequence_parallel=True, tensor_model_parallel_size=world,
                            gradient_accumulation_fusion=False)
    torch.manual_seed(3)
    model_parallel_cuda_manual_seed(3)
    init = torch.nn.init.xavier_normal_
    column = ColumnParallelLinear(64, 128, config=cfg, init_method=init, bias=False, gather_output=False)
    row = RowParallelLinear(128, 64, config=cfg, init_method=init, bias=False, input_is_parallel=True,
                            skip_bias_add=True)
    x = torch.randn(40, 2, 64, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
    local = x.chunk(world, dim=0)[rank].clone()  # sequence parallel: this rank's part of the sequence

    def run(recipe):
        inp = local.clone().requires_grad_()
        for p in (*column.parameters(), *row.parameters()):
            p.grad = None
        calls = []
        with recorded_scaled_mm(calls), (torch_fp8.fp8_autocast(recipe) if recipe else contextlib.nullcontext()):
            out, _ = row(torch.nn.functional.gelu(column(inp)[0]))
        with recorded_scaled_mm(calls):
            out.float().pow(2).sum().backward()
        return out.float(), inp.grad.float(), column.weight.grad.float(), row.weight.grad.float(), calls

    fp8, bf16 = run(torch_fp8.TensorwiseFp8(hybrid=True)), run(None)
    names = ("out", "dx", "column_wgrad", "row_wgrad")
    return {
        "rel_err": {n: ((a - b).abs().max() / b.abs().max()).item() for n, a, b in zip(names, fp8[:4], bf16[:4])},
        "local_shape": list(local.shape),
        "out_shape": list(fp8[0].shape),
        "calls": [f"{a} x {b}" for a, b, *_ in fp8[4]],
        "bf16_calls": len(bf16[4]),
    }


# TE's linear modules (megatron.core.extensions.transformer_engine): TE runs each in FP8 under fp8_autocast.
TE_LINEARS = ("TELinear", "TEColumnParallelLinear", "TERowParallelLinear", "TELayerNormColumnParallelLinear")


def te_spec_model(shape: str):
    """A bf16 GPTModel of the TE spec (as frameworks build it) with --fp8-format hybrid --fp8-recipe
    tensorwise; every linear's sides multiples of 16 (the FP8 GEMM's). DeepSeek's shape without its
    MoE layers (the torch grouped experts in FP8 are the moe group's)."""
    import torch

    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    base = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, num_query_groups=2,
                kv_channels=16, normalization="RMSNorm", gated_linear_unit=True,
                activation_func=torch.nn.functional.silu, add_bias_linear=False, bf16=True,
                params_dtype=torch.bfloat16, use_cpu_initialization=True, bias_activation_fusion=False,
                gradient_accumulation_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
                apply_rope_fusion=False, hidden_dropout=0.0, attention_dropout=0.0, fp8="hybrid",
                fp8_recipe="tensorwise", transformer_impl="transformer_engine")
    if shape == "deepseek":
        base.update(multi_latent_attention=True, q_lora_rank=32, kv_lora_rank=32, qk_head_dim=16,
                    qk_pos_emb_head_dim=16, v_head_dim=16, rope_type="rope", num_query_groups=None,
                    qk_layernorm=True, mtp_num_layers=1)
    cfg = (MLATransformerConfig if shape == "deepseek" else TransformerConfig)(**base)
    torch.manual_seed(1)
    model_parallel_cuda_manual_seed(1)
    block = get_gpt_decoder_block_spec(cfg, use_transformer_engine=True, normalization=cfg.normalization)
    mtp = (get_gpt_mtp_block_spec(cfg, block.layer_specs[-1], use_transformer_engine=True)
           if cfg.mtp_num_layers else None)
    return GPTModel(cfg, block, vocab_size=128, max_sequence_length=16, position_embedding_type="rope",
                    mtp_block_spec=mtp)


def te_spec() -> dict:
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.extensions.torch_te_layers import TorchTELinear

    if not torch.distributed.is_initialized():  # block() set it up in the same child
        setup(Path(os.getcwd()))
    result = {}
    for shape in ("llama", "deepseek"):
        model = te_spec_model(shape)
        calls, forward_calls = [], {}
        linears = {path: module for path, module in model.named_modules()
                   if getattr(type(module), "te_module", None) in TE_LINEARS or path == "output_layer"}

        def count(path):
            def pre(module, args):
                forward_calls[path] = forward_calls.get(path, 0) - len(calls)

            def post(module, args, output):
                forward_calls[path] += len(calls)
            return pre, post

        for path, module in linears.items():
            pre, post = count(path)
            module.register_forward_pre_hook(pre)
            module.register_forward_hook(post)
        tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(3))
        with recorded_scaled_mm(calls):
            loss = model(tokens, torch.arange(16).expand(2, 16), None, labels=torch.roll(tokens, -1, 1))
            forward = len(calls)
            loss.float().mean().backward()
        result[shape] = {
            "te_modules": {path: type(module).te_module for path, module in linears.items()
                           if path != "output_layer"},
            "forward_calls": {path: forward_calls.get(path, 0) for path in linears},
            "forward": forward, "backward": len(calls) - forward,
            "dtypes": sorted({f"{a} x {b}" for a, b, *_ in calls}),
            "finite": bool(torch.isfinite(loss).all()),
            "active_after": torch_fp8.active_recipe() is not None,
        }
    # MLA's duplicated down projection: its three GEMMs against the dequantized operands' (as gemm()).
    linear = next(m for m in model.modules() if isinstance(m, TorchTELinear))
    recipe = torch_fp8.TensorwiseFp8(hybrid=True)
    fwd, bwd = recipe.formats(torch.device("cpu"))
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(37, 1, 64, generator=generator).to(torch.bfloat16).requires_grad_()
    g = (torch.randn(37, 1, linear.weight.shape[0], generator=generator) * 1e-3).to(torch.bfloat16)
    linear.weight.grad = None
    calls = []
    with recorded_scaled_mm(calls), torch_fp8.fp8_autocast(recipe):
        out, _ = linear(x)
    with recorded_scaled_mm(calls):
        out.backward(g)
    x2, g2, w = x.detach().view(37, 64), g.view(37, -1), linear.weight.detach()
    xq, wq, gq = torch_fp8.quantize(x2, fwd), torch_fp8.quantize(w, fwd), torch_fp8.quantize(g2, bwd)
    references = {"forward": (out.view(37, -1), dequantized(*xq) @ dequantized(*wq).t(), x2.float() @ w.float().t()),
                  "dgrad": (x.grad.view(37, 64), dequantized(*gq) @ dequantized(*wq), g2.float() @ w.float()),
                  "wgrad": (linear.weight.grad, dequantized(*gq).t() @ dequantized(*xq), g2.float().t() @ x2.float())}
    result["TorchTELinear"] = {"calls": [c[:2] for c in calls]}
    for name, (got, dequant_ref, bf16_ref) in references.items():
        scale = bf16_ref.abs().max().item()
        result["TorchTELinear"][name] = {"err_dequant": (got.float() - dequant_ref).abs().max().item() / scale,
                                         "err_bf16": (got.float() - bf16_ref).abs().max().item() / scale}
    return result


def relative(got, want) -> list:
    """[largest difference / largest value, norm of the difference / norm]."""
    diff = got.float() - want
    return [diff.abs().max().item() / want.abs().max().item(), (diff.norm() / want.norm()).item()]


def moe_gemms(hybrid: bool) -> dict:
    """grouped_linear under fp8_autocast: 3 experts of [48, 64], 37, 0 and 21 tokens; each expert's
    three GEMMs against the fp32 GEMM of its own dequantized operands and against fp32 on the
    unquantized ones (the FP8 rounding), relative to the largest value."""
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.transformer.moe import torch_grouped_mlp

    generator = torch.Generator().manual_seed(13)
    tokens = [37, 0, 21]
    weights = [(torch.randn(48, 64, generator=generator) * (0.02 * (i + 1))).to(torch.bfloat16).requires_grad_()
               for i in range(3)]
    x = torch.randn(sum(tokens), 64, generator=generator).to(torch.bfloat16).requires_grad_()
    g = (torch.randn(sum(tokens), 48, generator=generator) * 1e-3).to(torch.bfloat16)
    recipe = torch_fp8.TensorwiseFp8(hybrid=hybrid)
    fwd, bwd = recipe.formats(torch.device("cpu"))
    calls = []
    with recorded_scaled_mm(calls), torch_fp8.fp8_autocast(recipe):
        out = torch_grouped_mlp.grouped_linear(x, weights, tokens)
    forward_calls = len(calls)
    with recorded_scaled_mm(calls):
        out.backward(g)
    errors = {name: {"err_dequant": 0.0, "err_bf16": 0.0} for name in ("forward", "dgrad", "wgrad")}
    xs, gs, outs, dxs = (torch.split(t.detach(), tokens) for t in (x, g, out, x.grad))
    for i, (xi, gi, weight) in enumerate(zip(xs, gs, weights)):
        if not tokens[i]:
            continue
        w = weight.detach()
        xq, wq, gq = torch_fp8.quantize(xi, fwd), torch_fp8.quantize(w, fwd), torch_fp8.quantize(gi, bwd)
        for name, got, dequant_ref, fp32_ref in (
                ("forward", outs[i], dequantized(*xq) @ dequantized(*wq).t(), xi.float() @ w.float().t()),
                ("dgrad", dxs[i], dequantized(*gq) @ dequantized(*wq), gi.float() @ w.float()),
                ("wgrad", weight.grad, dequantized(*gq).t() @ dequantized(*xq), gi.float().t() @ xi.float())):
            scale = fp32_ref.abs().max().item()
            errors[name]["err_dequant"] = max(errors[name]["err_dequant"],
                                              (got.float() - dequant_ref).abs().max().item() / scale)
            errors[name]["err_bf16"] = max(errors[name]["err_bf16"], (got.float() - fp32_ref).abs().max().item() / scale)
    return {
        **errors,
        "forward_calls": [c[:2] for c in calls[:forward_calls]],
        "backward_calls": [c[:2] for c in calls[forward_calls:]],
        "shapes": [list(out.shape), list(x.grad.shape)],
        "empty_expert": {"rows": outs[1].shape[0], "wgrad_zero": not weights[1].grad.any().item()},
    }


@contextlib.contextmanager
def simulated_scaled_grouped_mm(calls: list):
    """torch._scaled_grouped_mm as a GPU that has it runs it (the CPU has no kernel): the real op's
    argument checks on meta tensors (dtypes, layouts, scale shapes), then each group's rows times
    its expert's matrix on the dequantized operands in fp32 (rowwise scales)."""
    import torch

    real = torch._scaled_grouped_mm

    def scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, out_dtype=None, **kwargs):
        real(*(t.to("meta") for t in (a, b, scale_a, scale_b)), offs=offs.to("meta"), out_dtype=out_dtype, **kwargs)
        calls.append([str(a.dtype).removeprefix("torch."), str(b.dtype).removeprefix("torch."), list(a.shape),
                      list(b.shape)])
        out, start = torch.empty(a.shape[0], b.shape[2]), 0
        for group, end in enumerate(offs.tolist()):
            out[start:end] = (a[start:end].float() * scale_a[start:end, None]) @ (b[group].float() * scale_b[group])
            start = end
        return out.to(out_dtype)

    torch._scaled_grouped_mm = scaled_grouped_mm
    try:
        yield
    finally:
        torch._scaled_grouped_mm = real


def moe_scaled_grouped() -> dict:
    """Where the device has torch._scaled_grouped_mm (simulated): the experts' FP8 forward in one
    call, equal to the per-expert torch._scaled_mm forward (the same operands and scales); the
    backward per expert; said once."""
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.transformer.moe import torch_grouped_mlp

    generator = torch.Generator().manual_seed(17)
    tokens = [37, 0, 21]
    weights = [(torch.randn(48, 64, generator=generator) * 0.02).to(torch.bfloat16).requires_grad_() for _ in range(3)]
    x = torch.randn(sum(tokens), 64, generator=generator).to(torch.bfloat16).requires_grad_()
    recipe = torch_fp8.TensorwiseFp8(hybrid=True)
    said = set(torch_grouped_mlp._SAID)
    torch_grouped_mlp._FP8_GROUPED.pop("cpu", None)
    torch_grouped_mlp._SAID.discard(("cpu", "fp8"))
    grouped_calls, calls = [], []
    try:
        with simulated_scaled_grouped_mm(grouped_calls), torch_fp8.fp8_autocast(recipe):
            torch_grouped_mlp.runs_scaled_grouped_forward(x.device, recipe)  # its trial, outside the counts
            grouped_calls.clear()
            with recorded_scaled_mm(calls):
                out = torch_grouped_mlp.grouped_linear(x, weights, tokens)
                forward_calls = len(calls)
                out.backward(torch.randn(out.shape, generator=generator).to(out.dtype))
        reference = torch.cat([recipe.forward(rows, w) for rows, w in zip(torch.split(x.detach(), tokens), weights)
                               if rows.shape[0]])
    finally:
        torch_grouped_mlp._FP8_GROUPED.pop("cpu", None)  # later cases find the CPU's own answer again
        torch_grouped_mlp._SAID.clear()
        torch_grouped_mlp._SAID.update(said)
    return {
        "grouped_calls": [c[:2] for c in grouped_calls],
        "forward_scaled_mm": forward_calls,
        "backward_scaled_mm": [c[:2] for c in calls[forward_calls:]],
        "err": relative(out.detach(), reference.float()),
        "finite_grads": all(bool(torch.isfinite(w.grad).all()) for w in weights),
    }


def moe_config(**overrides):
    import torch
    import torch.nn.functional as F

    from megatron.core.transformer.transformer_config import TransformerConfig

    kwargs = dict(num_layers=1, hidden_size=64, ffn_hidden_size=64, moe_ffn_hidden_size=64, num_attention_heads=4,
                  num_moe_experts=4, moe_router_topk=2, moe_grouped_gemm=True, gated_linear_unit=True,
                  activation_func=F.silu, add_bias_linear=False, bias_activation_fusion=False,
                  gradient_accumulation_fusion=False, hidden_dropout=0.0, params_dtype=torch.bfloat16, bf16=True,
                  fp8="hybrid", fp8_recipe="tensorwise")
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


def moe_module(cfg):
    """TorchGroupedMLP as the local spec builds it (one seed: the same weights for every config);
    its fc1 and fc2 outputs and gradients in FP8 under the config's recipe, else in its dtype."""
    import torch

    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.moe.moe_utils import get_default_pg_collection

    torch.manual_seed(21)
    model_parallel_cuda_manual_seed(21)
    return LocalSpecProvider().grouped_mlp_modules(True)(cfg.num_moe_experts, cfg,
                                                         pg_collection=get_default_pg_collection())


def moe() -> dict:
    import torch

    from megatron.core.extensions import torch_fp8
    from megatron.core.transformer.moe import torch_grouped_mlp

    if not torch.distributed.is_initialized():
        setup(Path(os.getcwd()))
    from testkit.checks.grouped_gemm import Records  # the grouped experts' log lines, as that check reads them

    handler = Records()
    log = logging.getLogger(torch_grouped_mlp.__name__)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    result = {"e4m3": moe_gemms(False), "hybrid": moe_gemms(True), "scaled_grouped": moe_scaled_grouped()}
    tokens = [21, 0, 16, 7]
    runs = {}
    for name, cfg in (("fp8", moe_config()), ("bf16", moe_config(fp8=None))):
        module = moe_module(cfg)
        generator = torch.Generator().manual_seed(5)
        hidden = torch.randn(sum(tokens), 64, generator=generator).to(torch.bfloat16).requires_grad_()
        probs = torch.rand(sum(tokens), generator=generator)
        calls = []
        context = torch_fp8.fp8_autocast(torch_fp8.recipe_for(cfg)) if cfg.fp8 else contextlib.nullcontext()
        with recorded_scaled_mm(calls), context:
            out, _ = module(hidden, torch.tensor(tokens), probs)
        forward = len(calls)
        with recorded_scaled_mm(calls):
            out.backward(torch.randn(out.shape, generator=generator).to(out.dtype))
        runs[name] = {"class": type(module).__name__, "module_fp8": module.config.fp8, "layer_fp8": cfg.fp8,
                      "forward": forward, "backward": len(calls) - forward,
                      "tensors": [out.detach().float(), hidden.grad.float(),
                                  *(p.grad.float() for _, p in sorted(module.named_parameters()))],
                      "empty_grads_zero": all(not getattr(module, f"linear_fc{k}").weight1.grad.any().item()
                                              for k in (1, 2))}
    fp8, bf16 = runs["fp8"], runs["bf16"]
    result["module"] = {
        **{k: v for k, v in fp8.items() if k != "tensors"},
        "bf16_calls": bf16["forward"] + bf16["backward"],
        "rel_err": {"out": relative(fp8["tensors"][0], bf16["tensors"][0]),
                    "dx": relative(fp8["tensors"][1], bf16["tensors"][1])},
        "grad_rel_err": [max(errs) for errs in zip(*(relative(a, b) for a, b in zip(fp8["tensors"][2:],
                                                                                   bf16["tensors"][2:]) if b.any()))],
        "records": handler.lines,
        "active_after": torch_fp8.active_recipe() is not None,
    }
    log.removeHandler(handler)
    try:
        moe_config(moe_grouped_gemm=False)
        result["sequential config"] = None
    except ValueError as error:
        result["sequential config"] = error_text(error)
    return result


def run(group: str) -> dict:
    return {name: globals()[name]() for name in group.split(",")}
