"""Child side of test_te_spec_torch.py: the Transformer Engine layer spec without TE (patch
te-spec-torch) on the patched tree, CPU, gloo (one rank, or every rank of a TP 2 job). Returns plain
values; the parent asserts. Groups:
- spec: for each case, the TE spec's module tree (layer specs of get_gpt_decoder_block_spec with
  use_transformer_engine=True, and the block's final norm) built twice: with upstream's
  TESpecProvider and TENorm (the classes of the tree's own transformer_engine_spec_provider.py and
  transformer_engine.py, importable without TE) and with what the tree gives without TE; each slot
  where upstream puts a TE module, and what ours puts there (a class standing for that TE module);
- names: for each case, the GPTModel built with that spec: each module standing for a TE module,
  with its own parameters (name and shape) and state-dict keys; the model's parameter names and
  state-dict keys; the local spec's model's, and its sharded state-dict keys beside ours;
- loss: for each case, the local spec's model and ours from one seed, the local weights copied into
  ours by name (upstream's local-to-TE key map), one fp32 forward and backward: the losses and the
  largest gradient difference;
- checkpoint: torch_dist saved from ours (Llama, MLA), loaded into the local spec's model
  (pretrain_gpt.py's spec) or into ours, and a state dict loaded into ours with TE's FP8
  _extra_state (said once);
- tp2: (two ranks) the local spec's Qwen3-style model and ours at TP 2 with sequence parallelism:
  losses and each rank's parameter shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path

from testkit.checks import gloo

from rocmpatch.smoke.op_checks import local_to_te

VOCAB, SEQ, BATCH = 128, 16, 2
UPSTREAM_PROVIDER = "TE_SPEC_UPSTREAM_PROVIDER"  # the pristine tree's transformer_engine_spec_provider.py


def setup(workdir: Path, tp: int = 1) -> None:
    global torch, F
    import torch
    import torch.nn.functional as F

    from megatron.core import parallel_state

    gloo.join(workdir)
    parallel_state.initialize_model_parallel(tp, 1)


def config(case: str, **overrides):
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    base = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, num_query_groups=2,
                normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
                use_cpu_initialization=True, bias_activation_fusion=False, gradient_accumulation_fusion=False,
                masked_softmax_fusion=False, persist_layer_norm=False, apply_rope_fusion=False,
                hidden_dropout=0.0, attention_dropout=0.0)
    moe = dict(num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32, moe_layer_freq=[0, 1],
               moe_token_dispatcher_type="alltoall")
    mla = dict(multi_latent_attention=True, kv_lora_rank=16, qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16,
               rope_type="rope", num_query_groups=None)
    base.update({
        "llama": {},
        "gpt-layernorm-bias": dict(normalization="LayerNorm", add_bias_linear=True, gated_linear_unit=False,
                                   activation_func=F.gelu),
        "qwen3": dict(qk_layernorm=True),
        "moe": dict(moe, moe_shared_expert_intermediate_size=32),
        "moe-grouped": dict(moe, moe_grouped_gemm=True),
        "mla": dict(mla, q_lora_rank=32, qk_layernorm=True),
        "mla-no-q-lora": dict(mla, q_lora_rank=None, qk_layernorm=True),
        # DeepSeek-V3's shape: MLA, a dense first layer, MoE with a shared expert, one MTP layer.
        "deepseek": dict(mla, **moe, q_lora_rank=32, qk_layernorm=True, moe_shared_expert_intermediate_size=32,
                         mtp_num_layers=1),
    }[case])
    base.update(overrides)
    cls = MLATransformerConfig if base.get("multi_latent_attention") else TransformerConfig
    return cls(**base)


UPSTREAM_NORM_ADAPTER = None  # upstream's _TENormWithResidual (TENorm where a residual follows)
CASES = ("llama", "gpt-layernorm-bias", "qwen3", "moe", "moe-grouped", "mla", "mla-no-q-lora", "deepseek")
# The TE spec fuses a norm into the query projection where the local spec has none (no query
# latent): not the same model, so no loss comparison there.
SAME_MODEL = ("llama", "gpt-layernorm-bias", "qwen3", "moe", "moe-grouped", "mla", "deepseek")


# ---------------------------------------------------------------- spec: against upstream's TE spec


def upstream_te_spec_provider():
    """Upstream's TESpecProvider: the pristine tree's transformer_engine_spec_provider.py (its path
    in UPSTREAM_PROVIDER), loaded beside the patched tree's modules, which it imports."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("upstream_te_spec_provider", os.environ[UPSTREAM_PROVIDER])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def te_specs(cfg, use_te: bool = True) -> dict:
    """{"block": the decoder block spec; with MTP also "mtp": the MTP block spec (of the last layer's
    spec, as pretrain_gpt.py builds it) and "mtp_layer": get_mtp_layer_spec's}."""
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.multi_token_prediction import get_mtp_layer_spec

    block = gpt_layer_specs.get_gpt_decoder_block_spec(cfg, use_transformer_engine=use_te,
                                                       normalization=cfg.normalization)
    if not cfg.mtp_num_layers:
        return {"block": block}
    last = block.layer_specs[-1]
    return {"block": block, "mtp": gpt_layer_specs.get_gpt_mtp_block_spec(cfg, last, use_transformer_engine=use_te),
            "mtp_layer": get_mtp_layer_spec(last, use_transformer_engine=use_te)}


def block_spec(cfg, upstream: bool) -> dict:
    """te_specs(cfg) with this tree's TE spec, or with upstream's TESpecProvider and TENorm."""
    from megatron.core.extensions import transformer_engine as te_ext
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer import multi_token_prediction

    if not upstream:
        return te_specs(cfg)
    provider_module = upstream_te_spec_provider()
    provider_module.is_te_min_version = lambda version, *args, **kwargs: True  # the spec with a current TE
    saved = gpt_layer_specs.TESpecProvider, gpt_layer_specs.TENorm, multi_token_prediction.TESpecProvider
    gpt_layer_specs.TESpecProvider, gpt_layer_specs.TENorm = provider_module.TESpecProvider, te_ext.TENorm
    multi_token_prediction.TESpecProvider = provider_module.TESpecProvider
    global UPSTREAM_NORM_ADAPTER
    UPSTREAM_NORM_ADAPTER = provider_module._TENormWithResidual
    try:
        return te_specs(cfg)
    finally:
        gpt_layer_specs.TESpecProvider, gpt_layer_specs.TENorm, multi_token_prediction.TESpecProvider = saved


def leaves(node, path: str = "") -> dict:
    """{slot path: what fills it} of a spec tree (ModuleSpec, submodules dataclasses, partials)."""
    from megatron.core.transformer.spec_utils import ModuleSpec

    if isinstance(node, ModuleSpec):
        return {f"{path}:module": node.module, **leaves(node.submodules, path)}
    if isinstance(node, functools.partial):
        found = {f"{path}:module": node.func}
        for key, value in node.keywords.items():
            found.update(leaves(value, f"{path}.{key}"))
        return found
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        found = {}
        for field in dataclasses.fields(node):
            found.update(leaves(getattr(node, field.name), f"{path}.{field.name}"))
        return found
    if isinstance(node, dict):
        found = {}
        for key, value in node.items():
            found.update(leaves(value, f"{path}{key}"))
        return found
    if isinstance(node, (list, tuple)):
        found = {}
        for i, value in enumerate(node):
            found.update(leaves(value, f"{path}[{i}]"))
        return found
    return {path: node}


def te_name(obj) -> str | None:
    """The name of a Transformer Engine module of megatron.core.extensions.transformer_engine (or
    upstream's TENorm-with-residual adapter), None for anything else."""
    from megatron.core.extensions import transformer_engine as te_ext

    if obj is None or type(obj) in (bool, int, float, str, dict):  # isinstance: a MagicMock class passes
        return None
    if obj is UPSTREAM_NORM_ADAPTER:
        return "TENorm"
    for name in dir(te_ext):
        if name.startswith("TE") and getattr(te_ext, name) is obj:
            return name
    return None


def same(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def describe(obj) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def spec() -> dict:
    result = {}
    for case in CASES:
        cfg = config(case)
        theirs = leaves(block_spec(cfg, upstream=True))
        ours = leaves(block_spec(cfg, upstream=False))
        slots, other, grouped = [], [], None
        if cfg.moe_grouped_gemm:
            # Upstream's TEGroupedMLP and its TE grouped linears exist only with TE (None without it):
            # ours are the local torch grouped experts, a TEGroupedMLP (test_grouped_gemm.py checks them).
            from megatron.core.transformer.moe.experts import TEGroupedMLP

            experts = [v for k, v in ours.items() if k.endswith(".mlp.submodules.experts:module")]
            grouped = [describe(e) for e in experts if issubclass(e, TEGroupedMLP)]
            theirs = {k: v for k, v in theirs.items() if ".mlp.submodules.experts" not in k}
            ours = {k: v for k, v in ours.items() if ".mlp.submodules.experts" not in k}
        for path in sorted(set(theirs) | set(ours)):
            upstream_obj, our_obj = theirs.get(path, "<missing>"), ours.get(path, "<missing>")
            name = te_name(upstream_obj)
            if name is not None:
                slots.append([path, name, describe(our_obj), getattr(our_obj, "te_module", None)])
            elif not same(upstream_obj, our_obj):
                other.append([path, describe(upstream_obj), describe(our_obj)])
        result[case] = {"te_slots": slots, "other_differences": other, "grouped_experts": grouped}
    return result


# ---------------------------------------------------------------- models


def build(cfg, te_spec: bool, seed: int = 1234):
    """The GPTModel of the TE spec (config.transformer_impl "transformer_engine", as frameworks leave
    it) or of the local spec ("local", as pretrain_gpt.py sets it without TE)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    cfg = dataclasses.replace(cfg, transformer_impl="transformer_engine" if te_spec else "local")
    specs = te_specs(cfg, use_te=te_spec)
    return GPTModel(cfg, specs["block"], vocab_size=VOCAB, max_sequence_length=SEQ, position_embedding_type="rope",
                    mtp_block_spec=specs.get("mtp"))


def te_modules(model) -> list:
    """[path, te_module, {param: shape}, [own state-dict keys]] of each module standing for a TE one."""
    found = []
    for path, module in model.named_modules():
        te_module = getattr(type(module), "te_module", None)
        if te_module is None:
            continue
        params = {name: list(p.shape) for name, p in module.named_parameters(recurse=False)}
        keys = [key for key in module.state_dict() if "." not in key]
        found.append([path, te_module, params, keys])
    return found


def sharded_keys(model) -> list:
    """The torch_dist keys (the layers' key maps applied; layers stacked on one axis)."""
    return sorted({getattr(value, "key", key) for key, value in model.sharded_state_dict().items()})


def names() -> dict:
    result = {}
    for case in CASES:
        cfg = config(case)
        ours, local = build(cfg, True), build(cfg, False)
        mapping = set(ours.state_dict())
        result[case] = {
            "normalization": cfg.normalization,
            "te_modules": te_modules(ours),
            "params": {n: list(p.shape) for n, p in ours.named_parameters()},
            "state_keys": sorted(ours.state_dict().keys()),
            "local_params_in_te_names": {local_to_te(n, mapping): list(p.shape) for n, p in local.named_parameters()},
            "local_state_keys_in_te_names": sorted(local_to_te(k, mapping) for k in local.state_dict()),
            "sharded_keys": sharded_keys(ours),
            "local_sharded_keys": sharded_keys(local),
        }
    return result


def batch():
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    return tokens, torch.arange(SEQ).expand(BATCH, SEQ), torch.roll(tokens, -1, 1)


def loss_and_grads(model, te_names=None) -> tuple:
    tokens, positions, labels = batch()
    loss = model(tokens, positions, None, labels=labels).float().mean()
    loss.backward()
    grads = {(local_to_te(n, te_names) if te_names else n): p.grad.detach().clone()
             for n, p in model.named_parameters()}
    return loss.item(), grads


def copy_local_into(ours, local) -> int:
    ours_params = dict(ours.named_parameters())
    with torch.no_grad():
        for name, param in local.named_parameters():
            ours_params[local_to_te(name, ours_params)].copy_(param)
    return len(ours_params)


def against_local(cfg):
    """The TE-spec model and the local one from `cfg`, the local weights copied in: the TE-spec model and
    {local, ours: the losses; grad_diff: the largest gradient difference; names_equal: same parameters}."""
    ours, local = build(cfg, True, seed=1), build(cfg, False, seed=2)
    copy_local_into(ours, local)
    local_loss, local_grads = loss_and_grads(local, dict(ours.named_parameters()))
    our_loss, our_grads = loss_and_grads(ours)
    return ours, {"local": local_loss, "ours": our_loss, "names_equal": sorted(local_grads) == sorted(our_grads),
                  "grad_diff": max((our_grads[n] - g).abs().max().item() for n, g in local_grads.items())}


def loss() -> dict:
    result = {}
    for case in SAME_MODEL:
        _, compared = against_local(config(case))
        compared["same_params"] = compared.pop("names_equal")
        result[case] = compared
    return result


# ---------------------------------------------------------------- checkpoints


def checkpoint() -> dict:
    from megatron.core import dist_checkpointing

    result = {}
    # Dense layers: into the local spec's model (pretrain_gpt.py's without TE) through upstream's
    # key map; MLA layers (which that map does not cover, nor MoE's norm): into the TE spec's model.
    for case, into in (("llama", "local"), ("mla", "te")):
        cfg = config(case)
        ours, other = build(cfg, True, seed=1), build(cfg, into == "te", seed=2)
        directory = Path(os.getcwd()) / f"ckpt-{case}"
        directory.mkdir()
        dist_checkpointing.save(ours.sharded_state_dict(), str(directory))
        other.load_state_dict(dist_checkpointing.load(other.sharded_state_dict(), str(directory)), strict=False)
        ours_params = dict(ours.named_parameters())
        result[case] = {
            "into": into,
            "diff": max((ours_params[local_to_te(n, ours_params)] - p).abs().max().item()
                        for n, p in other.named_parameters()),
        }
    # A plain state dict with TE's FP8 scaling state, then one without _extra_state (the local spec's).
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append([record.levelname, record.getMessage()])
    logging.getLogger("megatron.core.extensions.torch_te_layers").addHandler(handler)
    cfg = config("llama")
    ours = build(cfg, True)
    state = ours.state_dict()
    for key in state:
        if key.endswith("_extra_state"):
            state[key] = torch.tensor([1, 2, 3], dtype=torch.uint8)  # stands for TE's pickled FP8 state
    missing, unexpected = ours.load_state_dict(state, strict=True)
    without = {k: v for k, v in ours.state_dict().items() if not k.endswith("_extra_state")}
    ours.load_state_dict(without, strict=True)
    saved = ours.state_dict()
    result["fp8_extra_state"] = {
        "records": records, "missing": list(missing), "unexpected": list(unexpected),
        "saved": {k: [str(saved[k].dtype), list(saved[k].shape)] for k in (
            "decoder.layers.0.self_attention.linear_qkv._extra_state", "decoder.final_layernorm._extra_state",
            "decoder.layers.0.self_attention.core_attention._extra_state")},
    }
    return result


# ---------------------------------------------------------------- tensor parallel


def tp2() -> dict:
    """Runs as each of two ranks (setup with TP 2)."""
    result = {}
    for case in ("qwen3",):
        ours, compared = against_local(config(case, tensor_model_parallel_size=2, sequence_parallel=True))
        del compared["names_equal"]
        result[case] = {**compared, "shapes": {n: list(p.shape) for n, p in ours.named_parameters() if ".layers.0." in n}}
    return result


def run(group: str) -> dict:
    setup(Path(os.getcwd()), tp=2 if group == "tp2" else 1)
    return {name: globals()[name]() for name in group.split(",")}
