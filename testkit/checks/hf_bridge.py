"""Child side of test_te_spec_torch.py's mbridge checks (optional: they need mbridge and a
transformers it supports): tiny random Hugging Face checkpoints, made offline with transformers,
loaded by mbridge into the Megatron model it builds with the TE spec on the patched tree without TE
(CPU, fp32, TP 1), their logits against Hugging Face's; then saved back by mbridge and loaded by
transformers, whose logits must be the same. Groups: one per model family (llama, qwen3, qwen3_moe,
mixtral); tp2 and ep2 (as each of two ranks: TP 2, EP 2); `journey_import`/`journey_export` convert for and from
pretrain_gpt.py (torch_dist).

DeepSeek-V3 (group deepseek_v3: MLA, a dense first layer, MoE with a shared expert and expert bias;
no MTP layer) loads only with docs/training.md's two user-side settings for mbridge 0.15.1, which
this tree's patches cannot change: its bridge passes max_position_embeddings to MLATransformerConfig,
which megatron-core 0.19 calls original_max_position_embeddings (TypeError, with or without TE), and
its checkpoint reader imports triton (to dequantize FP8 checkpoints; GPU builds of PyTorch have it).
Its export is not checked: mbridge moves the routers' expert_bias to torch.cuda.current_device().

mbridge 0.15.1's Bridge.get_model fails on megatron-core 0.19 before building anything (with or
without TE: it compares with ModelType.encoder_and_decoder, which 0.19 removed) and moves the model
to the GPU; the model is built with the bridge's own provider instead, as docs/training.md shows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SEQ, BATCH = 12, 2
SHARED = "HF_BRIDGE_SHARED_DIR"  # a directory every rank sees (default: the working directory)


def setup(workdir: Path, layout: str = "tp") -> None:
    """One gloo rank, or every rank of a gloo job (RANK set): tensor parallel over all of them
    (layout "tp") or expert parallel ("ep")."""
    global torch
    import torch
    import torch.distributed as dist

    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    if "RANK" in os.environ:  # every rank of a gloo job: tensor parallelism over all of them
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", init_method=f"file://{workdir / 'dist-store'}", rank=0, world_size=1)
    size = dist.get_world_size()
    if layout == "ep":
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=size)
    else:
        parallel_state.initialize_model_parallel(size, 1)
    model_parallel_cuda_manual_seed(0)
    import_transformers()


def import_transformers() -> None:
    """transformers 4 asks importlib.util.find_spec whether apex, flash_attn, ... exist when it is
    imported; the child's blocker answers by raising, so transformers is imported without it (it
    only probes) and Megatron, imported before and after, still sees none of them."""
    blockers = [finder for finder in sys.meta_path if type(finder).__name__ == "BlockNvidiaOnly"]
    for finder in blockers:
        sys.meta_path.remove(finder)
    try:
        import transformers  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
    finally:
        sys.meta_path[:0] = blockers


def hf_model(family: str, path: Path):
    """A tiny random Hugging Face model of `family`, saved to `path` (fp32, untied embeddings)."""
    import transformers

    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
    moe = dict(num_experts_per_tok=2, output_router_logits=False)
    config, model_class = {
        "llama": (lambda: transformers.LlamaConfig(**common), transformers.LlamaForCausalLM),
        "qwen3": (lambda: transformers.Qwen3Config(head_dim=16, **common), transformers.Qwen3ForCausalLM),
        "qwen3_moe": (lambda: transformers.Qwen3MoeConfig(head_dim=16, num_experts=4, moe_intermediate_size=32,
                                                          decoder_sparse_step=1, norm_topk_prob=True, **moe, **common),
                      transformers.Qwen3MoeForCausalLM),
        "mixtral": (lambda: transformers.MixtralConfig(head_dim=16, num_local_experts=4, **moe, **common),
                    transformers.MixtralForCausalLM),
    }[family]
    torch.manual_seed(0)
    model = model_class(config()).float().eval()
    if torch.distributed.get_rank() == 0:
        model.save_pretrained(path)
    torch.distributed.barrier()
    return model


def shared_dir() -> Path:
    """Where the checkpoints go: the same directory for every rank (rank 0 writes them)."""
    return Path(os.environ.get(SHARED, os.getcwd()))


def bridge_for(path: Path):
    """mbridge's bridge for the checkpoint, with what this CPU tree needs: CPU initialization and
    the fusions that need TE, apex or a CUDA kernel off."""
    from mbridge import AutoBridge

    bridge = AutoBridge.from_pretrained(str(path), dtype=torch.float32)
    bridge.set_extra_args(use_cpu_initialization=True, masked_softmax_fusion=False, bias_activation_fusion=False,
                          bias_dropout_fusion=False, gradient_accumulation_fusion=False, apply_rope_fusion=False,
                          persist_layer_norm=False, moe_router_fusion=False, moe_permute_fusion=False)
    return bridge


def megatron_model(bridge):
    """The model mbridge builds (get_gpt_decoder_block_spec(..., use_transformer_engine=True)),
    built with its provider (Bridge.get_model: see the module's docstring)."""
    return bridge._model_provider([])(pre_process=True, post_process=True).eval()


def tokens():
    return torch.randint(0, 128, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))


def megatron_logits(model):
    with torch.no_grad():  # the whole vocabulary on every tensor-parallel rank
        return model(tokens(), torch.arange(SEQ).expand(BATCH, SEQ), None, runtime_gather_output=True)


def roundtrip(family: str, **config) -> dict:
    import transformers

    workdir = shared_dir() / family
    hf = hf_model(family, workdir / "hf")
    with torch.no_grad():
        reference = hf(tokens()).logits
    bridge = bridge_for(workdir / "hf")
    if config:
        bridge.set_extra_args(**config)
    model = megatron_model(bridge)
    bridge.load_weights([model], str(workdir / "hf"))
    logits = megatron_logits(model)
    bridge.save_weights([model], str(workdir / "export"))
    torch.distributed.barrier()
    back = transformers.AutoModelForCausalLM.from_pretrained(str(workdir / "export")).float().eval()
    with torch.no_grad():
        exported = back(tokens()).logits
    names = [name for name, _ in model.named_parameters()]
    return {
        "scale": reference.abs().max().item(),
        "logits_diff": (logits - reference).abs().max().item(),
        "export_diff": (exported - reference).abs().max().item(),
        "fused_norms": sum(n.endswith("linear_qkv.layer_norm_weight") for n in names),
        "input_layernorms": sum("input_layernorm" in n for n in names),
        "te_modules": sorted({type(m).te_module for m in model.modules() if getattr(type(m), "te_module", None)}),
    }


def llama() -> dict:
    return roundtrip("llama")


def tp2() -> dict:
    """(Two ranks: TP 2, with sequence parallelism as mbridge sets it.) Llama and Qwen3-MoE."""
    return {"llama": roundtrip("llama"), "qwen3_moe": roundtrip("qwen3_moe")}


def qwen3() -> dict:
    return roundtrip("qwen3")


def qwen3_moe() -> dict:
    return roundtrip("qwen3_moe")


def mixtral() -> dict:
    # mbridge 0.15.1 configures Mixtral's router with moe_router_pre_softmax=True: the top-k of the
    # softmax over all experts, not renormalized; Hugging Face's Mixtral renormalizes them (the
    # softmax over the top-k logits, Megatron's default). With mbridge's own config the logits differ
    # (by 0.03 here, with TE or without): the router is set as Hugging Face computes it.
    return roundtrip("mixtral", moe_router_pre_softmax=False)


# ---------------------------------------------------------------- pretrain_gpt.py's journey


def deepseek_v3() -> dict:
    """A tiny random DeepSeek-V3 (transformers' DeepseekV3ForCausalLM, fp32) loaded by mbridge with
    docs/training.md's settings: Megatron's logits against Hugging Face's."""
    import transformers
    from mbridge.core.safetensor_io import SafeTensorIO
    from mbridge.models.deepseek_v3 import DeepseekV3Bridge

    from megatron.core.transformer import MLATransformerConfig

    def mla_config(max_position_embeddings=4096, **kwargs):  # docs/training.md's rename
        return MLATransformerConfig(original_max_position_embeddings=max_position_embeddings, **kwargs)

    workdir = shared_dir() / "deepseek_v3"
    config = transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=1.0, max_position_embeddings=64,
        rms_norm_eps=1e-6, tie_word_embeddings=False, rope_scaling=None)
    torch.manual_seed(0)
    hf = transformers.DeepseekV3ForCausalLM(config).float().eval()
    hf.save_pretrained(workdir / "hf")
    with torch.no_grad():
        reference = hf(tokens()).logits
    saved = DeepseekV3Bridge.TransformerConfigClass
    DeepseekV3Bridge.TransformerConfigClass = staticmethod(mla_config)  # each set_extra_args builds the config
    try:
        bridge = bridge_for(workdir / "hf")
        bridge.set_extra_args(moe_shared_expert_overlap=False)  # a CUDA stream
    finally:
        DeepseekV3Bridge.TransformerConfigClass = saved
    bridge._get_safetensor_io = lambda path: SafeTensorIO(bridge._get_actual_hf_path(path))
    for variable in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"):
        # set by the families' models before in this process (their attention backend is auto, this one's fused)
        os.environ.pop(variable, None)
    model = megatron_model(bridge)
    bridge.load_weights([model], str(workdir / "hf"))
    logits = megatron_logits(model)
    return {
        "scale": reference.abs().max().item(),
        "logits_diff": (logits - reference).abs().max().item(),
        "te_modules": sorted({type(m).te_module for m in model.modules() if getattr(type(m), "te_module", None)}),
        "experts": type(model.decoder.layers[1].mlp.experts).__name__,
    }


def journey_import() -> dict:
    """The tiny Llama from Hugging Face weights to a torch_dist checkpoint that pretrain_gpt.py
    --load --finetune reads (journey/ckpt-in, its tracker file saying "release")."""
    from megatron.core import dist_checkpointing

    workdir = Path(os.getcwd()) / "journey"
    hf_model("llama", workdir / "hf")
    bridge = bridge_for(workdir / "hf")
    model = megatron_model(bridge)
    bridge.load_weights([model], str(workdir / "hf"))
    (workdir / "ckpt-in" / "release").mkdir(parents=True)
    dist_checkpointing.save({"model": model.sharded_state_dict(), "checkpoint_version": 3.0},
                            str(workdir / "ckpt-in" / "release"))
    (workdir / "ckpt-in" / "latest_checkpointed_iteration.txt").write_text("release")
    return {"params": len(list(model.parameters()))}


def journey_export() -> dict:
    """pretrain_gpt.py's checkpoint (journey/ckpt-out) back to Hugging Face weights: loaded into
    the TE spec's model (without the TE norms' _extra_state, which the local spec does not save),
    exported by mbridge, and read by transformers: its logits against the Megatron model's."""
    import transformers

    from megatron.core import dist_checkpointing

    workdir = Path(os.getcwd()) / "journey"
    bridge = bridge_for(workdir / "hf")
    model = megatron_model(bridge)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    bridge.load_weights([model], str(workdir / "hf"))
    imported = {n: p.detach().clone() for n, p in model.named_parameters()}
    iteration = (workdir / "ckpt-out" / "latest_checkpointed_iteration.txt").read_text().strip()
    sharded = {k: v for k, v in model.sharded_state_dict().items() if not k.endswith("_extra_state")}
    loaded = dist_checkpointing.load({"model": sharded}, str(workdir / "ckpt-out" / f"iter_{int(iteration):07d}"))
    missing, unexpected = model.load_state_dict(loaded["model"], strict=False)
    bridge.save_weights([model], str(workdir / "export"))
    back = transformers.AutoModelForCausalLM.from_pretrained(str(workdir / "export")).float().eval()
    with torch.no_grad():
        exported = back(tokens()).logits
    logits = megatron_logits(model)
    return {
        "iteration": iteration,
        "missing": [k for k in missing if not k.endswith("_extra_state")], "unexpected": list(unexpected),
        "trained": {n: (p - imported[n]).abs().max().item() for n, p in model.named_parameters()},
        "from_hf": max((imported[n] - before[n]).abs().max().item() for n in before),
        "export_diff": (exported - logits).abs().max().item(),
        "scale": logits.abs().max().item(),
    }


def ep2() -> dict:
    """(Two ranks: EP 2, two of the four experts on each.) Qwen3-MoE and Mixtral."""
    return {"qwen3_moe": roundtrip("qwen3_moe"), "mixtral": mixtral()}


def run(group: str) -> dict:
    setup(Path(os.getcwd()), "ep" if group == "ep2" else "tp")
    return {name: globals()[name]() for name in group.split(",")}
