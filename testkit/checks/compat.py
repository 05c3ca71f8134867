"""Child side of the compatibility features' tests (triton-optional, te-fallback, fusion-fallback,
help-fixed, vision-local, model-parallel, distopt-resume, cpu-training), checked in one process.

Runs in the child of testkit/child.py (NVIDIA-only modules refused, the tree first on sys.path), CPU only, and
returns plain values; the assertions live in tests/series/test_<feature>.py. Groups (comma-separated, one process):
- imports: which of megatron.core / megatron.training / ... import, and the error of those that do
  not; on a tree that still imports triton unguarded, that one kernel module is stubbed afterwards
  so the next failure (typing.override) shows as well;
- args: parse_args + validate_args + core_transformer_config_from_args for several command lines,
  with the WARNING lines validate_args printed;
- norm: WrappedTorchNorm's parameters under sequence parallelism, and its refusals;
- config: moe_paged_stash without triton; the GPT, T5 and heterogeneous GPT TE specs without TE;
- vision: CLIPViTModel and LLaVAModel with the local spec, a forward and backward on CPU (gloo);
- sp_grads: one of two gloo ranks, a torch norm's gradients after the TP reduction of
  finalize_model_grads (TP=2 + sequence parallelism);
- distopt: DistributedOptimizer's torch-Adam step handling (state_dict, load_state_dict,
  _set_main_param_and_optimizer_states) on a stand-in `self`, against a straight run;
- help: the help text of every Megatron argument, as `pretrain_gpt.py --help` formats it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types

BASE_ARGV = [
    "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--group-query-attention", "--num-query-groups", "2", "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2", "--lr", "1e-3",
    "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--bf16", "--mock-data",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128",
]
QUIET = ["--no-rope-fusion", "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm"]
# name: (world size, extra argv)
ARG_CASES = {
    "default": (1, []),
    "explicit_te": (1, ["--transformer-impl", "transformer_engine"]),
    "explicit_te_equals": (1, ["--transformer-impl=transformer_engine"]),
    "explicit_local_quiet": (1, ["--transformer-impl", "local", *QUIET]),
    "layernorm": (1, ["--normalization", "LayerNorm"]),
    "moe_grouped_gemm": (1, ["--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm"]),
    "moe": (1, ["--num-experts", "4", "--moe-router-topk", "2"]),
    "tp2_sp": (2, ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
    "pp2_distopt": (2, ["--pipeline-model-parallel-size", "2", "--use-distributed-optimizer", "--ckpt-format", "torch_dist"]),
    # te-impl-torch (0075): TE's spec from torch modules keeps the grouped experts; TE's kernels are refused
    "explicit_te_moe_grouped_gemm": (1, ["--transformer-impl", "transformer_engine", "--num-experts", "4",
                                         "--moe-router-topk", "2", "--moe-grouped-gemm"]),
    "explicit_te_delay_wgrad": (1, ["--transformer-impl", "transformer_engine", "--delay-wgrad-compute"]),
    "explicit_te_cuda_graph_te": (1, ["--transformer-impl", "transformer_engine", "--cuda-graph-impl", "transformer_engine"]),
    # cpu-training (0062): refused on the CPU path, checked here with the other argument cases
    "megatron_fsdp_on_cpu": (1, ["--use-megatron-fsdp", "--distributed-backend", "gloo", "--ckpt-format", "fsdp_dtensor"]),
}
ARG_KEYS = ("transformer_impl", "apply_rope_fusion", "gradient_accumulation_fusion", "masked_softmax_fusion",
            "no_persist_layer_norm", "moe_grouped_gemm", "sequence_parallel")
PAGED_STASH_OPS = "megatron.core.transformer.moe.ops.paged_stash"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def import_checked_modules() -> tuple[str, ...]:
    """The modules check_imports imports: the packages, and the training models the tree has (the
    ones that import typing.override: models/gpt.py and models/hybrid.py, or only hybrid.py)."""
    tree = sys.path[0]  # the child put the tree first
    models = tuple(f"megatron.training.models.{name}" for name in ("gpt", "hybrid")
                   if os.path.isfile(os.path.join(tree, "megatron", "training", "models", f"{name}.py")))
    return ("megatron.core", "megatron.training", *models, "megatron.training.arguments",
            "megatron.core.models.gpt.gpt_layer_specs")


def stand_in_for_triton() -> None:
    """A triton whose decorators return the function and whose names are placeholders: enough for a
    module that defines triton kernels at import (the tree's paged stash, where its kernels are not
    in a module of their own) to import, so that the next failure shows."""
    class Placeholder:
        def __getattr__(self, name):
            return Placeholder()

        def __call__(self, *args, **kwargs):
            return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else Placeholder()

    for name in ("triton", "triton.language"):
        module = types.ModuleType(name)
        module.__getattr__ = lambda attribute: Placeholder()
        sys.modules[name] = module
    sys.modules["triton"].language = sys.modules["triton.language"]
    sys.modules["triton"].__version__ = "3.0.0"  # read by version checks at import


def check_imports() -> dict:
    import importlib

    result = {"python": list(sys.version_info[:2]), "stubbed_paged_stash": False}
    for name in import_checked_modules():
        try:
            importlib.import_module(name)
            result[name] = None
        except Exception as exc:  # noqa: BLE001 - the error is the result
            result[name] = error_text(exc)
            if "triton" in str(exc) and not result["stubbed_paged_stash"]:
                if os.path.isfile(os.path.join(sys.path[0], *PAGED_STASH_OPS.split(".")) + ".py"):
                    stub = types.ModuleType(PAGED_STASH_OPS)
                    stub.GLOBAL_BLOCK_SIZE, stub.paged_stash_copy_kernel, stub.paged_stash_pop_kernel = 1024, None, None
                    sys.modules[PAGED_STASH_OPS] = stub
                else:
                    stand_in_for_triton()
                result["stubbed_paged_stash"] = True
                for loaded in [m for m in sys.modules if m.startswith("megatron")]:
                    if loaded != PAGED_STASH_OPS:
                        del sys.modules[loaded]
    return result


def check_args() -> dict:
    from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args

    results = {}
    for name, (world_size, extra) in ARG_CASES.items():
        os.environ.update(RANK="0", WORLD_SIZE=str(world_size))
        sys.argv = BASE_ARGV + extra
        out, case = io.StringIO(), {"error": None, "config_error": None}
        with contextlib.redirect_stdout(out):
            try:
                args = parse_args()
                validate_args(args)
                case.update({key: getattr(args, key) for key in ARG_KEYS})
                try:
                    core_transformer_config_from_args(args)
                except Exception as exc:  # noqa: BLE001
                    case["config_error"] = error_text(exc)
            except Exception as exc:  # noqa: BLE001
                case["error"] = error_text(exc)
        case["warnings"] = [line for line in out.getvalue().splitlines() if line.startswith("WARNING: ")]
        results[name] = case
    return results


def check_norm() -> dict:
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    result = {"attributes": {}, "refusals": {}}
    for normalization in ("LayerNorm", "RMSNorm"):
        for sp in (True, False):
            config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization=normalization,
                                       tensor_model_parallel_size=2, sequence_parallel=sp)
            try:
                norm = WrappedTorchNorm(config=config, hidden_size=8, eps=1e-5)
                result["attributes"][f"{normalization}-sp{int(sp)}"] = [
                    getattr(p, "sequence_parallel", None) for p in norm.parameters()]
            except Exception as exc:  # noqa: BLE001
                result["attributes"][f"{normalization}-sp{int(sp)}"] = error_text(exc)
    for field in ("layernorm_zero_centered_gamma", "persist_layer_norm", "memory_efficient_layer_norm"):
        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, **{field: True})
        try:
            WrappedTorchNorm(config=config, hidden_size=8)
            result["refusals"][field] = None
        except Exception as exc:  # noqa: BLE001
            result["refusals"][field] = error_text(exc)
    return result


def check_config() -> dict:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec, get_gpt_layer_with_transformer_engine_spec
    from megatron.core.transformer import TransformerConfig

    result = {}
    try:
        TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, num_moe_experts=2, moe_paged_stash=True)
        result["paged_stash"] = None
    except Exception as exc:  # noqa: BLE001
        result["paged_stash"] = error_text(exc)
    result["local_spec"] = type(get_gpt_layer_local_spec()).__name__
    from megatron.core.models.gpt.heterogeneous.heterogeneous_layer_specs import get_gpt_heterogeneous_layer_spec
    from megatron.core.models.T5 import t5_spec

    te_specs = {
        "te_spec": get_gpt_layer_with_transformer_engine_spec,
        "t5_encoder_te_spec": lambda: t5_spec.get_t5_encoder_with_transformer_engine_block_spec(2),
        "t5_decoder_te_spec": lambda: t5_spec.get_t5_decoder_with_transformer_engine_block_spec(2),
        # the TE check comes before the config is read
        "heterogeneous_te_spec": lambda: get_gpt_heterogeneous_layer_spec(None, use_te=True),
    }
    for key, build in te_specs.items():
        try:
            spec = build()
            result[key] = None
            if key == "te_spec":  # te-spec-torch: torch modules under TE's names
                result["te_spec_linear_qkv"] = spec.submodules.self_attention.submodules.linear_qkv.__name__
        except Exception as exc:  # noqa: BLE001
            result[key] = error_text(exc)
    result["t5_local_spec"] = type(t5_spec.get_t5_encoder_with_local_block_spec(2)).__name__
    return result


def check_vision() -> dict:
    """CLIPViTModel and LLaVAModel built with the local spec (no TE), one forward and backward each
    on CPU, world size 1 over gloo."""
    import tempfile
    from copy import deepcopy

    import torch

    torch.distributed.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/store", rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.multimodal.llava_model import LLaVAModel
    from megatron.core.models.vision.clip_vit_model import CLIPViTModel
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        from megatron.core.transformer.spec_utils import get_submodules
    except ImportError:  # trees before it (0.16): a ModuleSpec's own submodules
        def get_submodules(spec):
            return spec.submodules

    parallel_state.initialize_model_parallel()
    model_parallel_cuda_manual_seed(123)
    spec = get_gpt_layer_local_spec()

    def clip():
        config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True)
        model = CLIPViTModel(config, spec, img_h=56, img_w=56, patch_dim=14)
        return model, model(torch.randn(2, 3, 56, 56)), type(model.ln_pre).__name__

    def llava():
        language = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4)
        vision = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=2)
        projection = TransformerConfig(num_layers=2, hidden_size=64, ffn_hidden_size=32, num_attention_heads=1)
        language.language_model_type, vision.vision_model_type = "dummy", "clip"
        model = LLaVAModel(
            language_transformer_config=language, language_transformer_layer_spec=spec, language_vocab_size=128,
            language_max_sequence_length=256, vision_transformer_config=vision,
            vision_transformer_layer_spec=deepcopy(spec), drop_vision_class_token=False,
            vision_projection_config=projection, vision_projection_layer_spec=deepcopy(get_submodules(spec.submodules.mlp)),
            img_h=56, img_w=56, patch_dim=14,
        )
        tokens = torch.randint(0, 100, (2, 32))
        tokens[:, 3] = model.image_token_index
        logits = model(torch.randn(2, 3, 56, 56), tokens, torch.arange(32).expand(2, -1), attention_mask=None)
        return model, logits[0] if isinstance(logits, tuple) else logits, type(model.vision_model.ln_pre).__name__

    result = {}
    try:
        for name, build in (("clip", clip), ("llava", llava)):
            try:
                model, out, norm = build()
                out.float().square().mean().backward()
                params = list(model.parameters())
                result[name] = {"shape": list(out.shape), "norm": norm, "params": len(params),
                                "with_grad": sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params),
                                "device": str(out.device)}
            except Exception as exc:  # noqa: BLE001
                result[name] = error_text(exc)
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()
    return result


def check_distopt() -> dict:
    import torch
    from megatron.core.optimizer import distrib_optimizer as distopt
    from megatron.core.optimizer import optimizer as optimizer_module

    D = distopt.DistributedOptimizer
    config = types.SimpleNamespace(fp16=False, use_precision_aware_optimizer_no_fp8_or_ds_fp8=False)
    ddp_config = types.SimpleNamespace(use_megatron_fsdp=False)

    # The keys load_state_dict matches saved param groups by: older trees require each in every group.
    identifiers = dict.fromkeys(getattr(optimizer_module, "param_group_identifier_keys", ()))

    def make():
        params = [torch.nn.Parameter(torch.linspace(-1, 1, 4)), torch.nn.Parameter(torch.linspace(0, 1, 3))]
        adam = torch.optim.Adam([{"params": params, **identifiers}], lr=0.1)
        fake = types.SimpleNamespace(optimizer=adam, grad_scaler=None, config=config,
                                     ddp_config=ddp_config, model_param_group_index_map={p: (0, i) for i, p in enumerate(params)})
        return fake, params

    def step(fake, params, k):
        for i, p in enumerate(params):
            p.grad = torch.full_like(p, 0.5 * (i + 1) * (-1) ** k)
        fake.optimizer.step()

    result = {"have_apex_or_te": distopt.HAVE_APEX_OR_TE}
    straight, straight_params = make()
    try:
        result["step_saved_before_any_step"] = D.state_dict(straight)["optimizer"]["param_groups"][0]["step"]
    except Exception as exc:  # noqa: BLE001
        result["step_saved_before_any_step"] = error_text(exc)
    for k in range(3):
        step(straight, straight_params, k)
    saved = D.state_dict(straight)
    result["step_saved"] = saved["optimizer"]["param_groups"][0]["step"]

    # Resume as torch_dist does: the new optimizer's state was initialised (step 0) when the sharded
    # state dict was built; load_state_dict, then the parameter state is copied in.
    resumed, resumed_params = make()
    for p in resumed_params:
        resumed.optimizer.state[p].update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
    D.load_state_dict(resumed, {"optimizer": saved["optimizer"]})
    with torch.no_grad():
        for p, src in zip(resumed_params, straight_params):
            state = straight.optimizer.state[src]
            D._set_main_param_and_optimizer_states(resumed, p, {
                "param": src.detach().clone(), "exp_avg": state["exp_avg"].clone(),
                "exp_avg_sq": state["exp_avg_sq"].clone(), "step": torch.tensor(0.0)})
    steps = [resumed.optimizer.state[p]["step"] for p in resumed_params]
    result["steps_after_resume"] = [s.item() for s in steps]
    result["step_tensor_shared"] = steps[0] is steps[1]
    for k in range(3, 5):
        step(straight, straight_params, k)
        step(resumed, resumed_params, k)
    result["steps_after_two_more"] = [resumed.optimizer.state[p]["step"].item() for p in resumed_params]
    result["max_param_diff"] = max((a - b).abs().max().item() for a, b in zip(resumed_params, straight_params))

    # A checkpoint saved before any step (step None) loads as step 0.
    fresh, fresh_params = make()
    for p in fresh_params:
        fresh.optimizer.state[p].update(step=torch.tensor(5.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
    empty, _ = make()
    try:
        D.load_state_dict(fresh, {"optimizer": D.state_dict(empty)["optimizer"]})
        result["steps_loaded_from_before_any_step"] = [fresh.optimizer.state[p]["step"].item() for p in fresh_params]
    except Exception as exc:  # noqa: BLE001
        result["steps_loaded_from_before_any_step"] = error_text(exc)
    return result


def check_pretrain() -> dict:
    """Upstream's own pretrain_gpt.py as __main__ (full tree only): explicit TE first, since that one
    stops in validate_args before the global args are set (with te-impl-torch it validates and stops
    later, as the default run does); the default run stops later, wherever this machine stops it
    (no GPU), after the argument validation this checks."""
    import runpy

    tree = sys.path[0]  # the child put the tree first
    os.chdir(tree)
    results = {}
    for name, extra in (("explicit_te", ["--transformer-impl", "transformer_engine"]), ("default", [])):
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        sys.argv = BASE_ARGV + extra
        out, case = io.StringIO(), {"error": None}
        with contextlib.redirect_stdout(out):
            try:
                runpy.run_path(os.path.join(tree, "pretrain_gpt.py"), run_name="__main__")
            except BaseException as exc:  # noqa: BLE001 - SystemExit included
                case["error"] = error_text(exc)
        case["warnings"] = [line for line in out.getvalue().splitlines() if line.startswith("WARNING: ")]
        case["validated"] = "-------------------- end of arguments ---------------------" in out.getvalue()
        results[name] = case
    return results


def check_help() -> dict:
    """Format the help of every Megatron argument (argparse expands each help string then)."""
    import argparse

    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(prog="pretrain_gpt.py", allow_abbrev=False))
    try:
        text = " ".join(parser.format_help().split())
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return {"error": error_text(exc), "paged_stash_help": None}
    start = text.find("--moe-paged-stash-buffer-size-factor-cuda MOE_PAGED_STASH_BUFFER_SIZE_FACTOR_CUDA Scale")
    return {"error": None, "paged_stash_help": text[start:start + 300] if start >= 0 else None}


def check_sp_grads() -> dict:
    """One of two ranks (RANK, WORLD_SIZE=2, MASTER_ADDR/PORT from the test), gloo, TP=2 + SP: the
    gradients of a torch norm after finalize_model_grads' tensor-parallel reduction."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed.finalize_model_grads import _allreduce_non_tensor_model_parallel_grads
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    rank = int(os.environ["RANK"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization="LayerNorm",
                                   tensor_model_parallel_size=2, sequence_parallel=True)
        model = torch.nn.Module()
        model.norm = WrappedTorchNorm(config=config, hidden_size=8)
        model.ddp_config = types.SimpleNamespace(use_megatron_fsdp=False)
        for param in model.parameters():
            param.main_grad = torch.full_like(param, float(rank + 1))  # each rank its own part's gradient
        _allreduce_non_tensor_model_parallel_grads([model], config)
        return {"rank": rank, "grads": sorted({v for p in model.parameters() for v in p.main_grad.tolist()})}
    finally:
        torch.distributed.destroy_process_group()


CHECKS = {"vision": check_vision, "sp_grads": check_sp_grads, "imports": check_imports, "pretrain": check_pretrain, "args": check_args, "norm": check_norm, "config": check_config, "distopt": check_distopt, "help": check_help}


def run(groups: str) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    return {group: CHECKS[group]() for group in groups.split(",")}
