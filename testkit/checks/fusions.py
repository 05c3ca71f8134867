"""Child side of test_torch_fusions.py and test_fused_adamw.py: the torch-native fusions the recipes turn on, against the unfused
path, on a tiny Llama-shaped GPTModel (local spec, RMSNorm, SwiGLU, RoPE, GQA) of the patched tree.

Runs in a fresh process (testkit/child.py), CPU, fp32, one rank over gloo. Each group builds the
same model twice from the same seed, once with a fusion and once without, and returns the loss and
the largest gradient difference of one forward and backward; what reached the torch ops is recorded
too (F.rms_norm calls, the optimizer's fused flag). The parent asserts.
"""

from __future__ import annotations

import os
from pathlib import Path

from testkit.checks import gloo

SEQ, BATCH, VOCAB = 32, 2, 256


def setup(workdir: Path) -> None:
    global torch, F, parallel_state
    import torch
    import torch.nn.functional as F

    from megatron.core import parallel_state

    gloo.join(workdir)
    parallel_state.initialize_model_parallel(1, 1)


def build(seed: int = 1234, bf16: bool = False, **fusions):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)
    flags = {"bias_activation_fusion": False, "apply_rope_fusion": False, "cross_entropy_loss_fusion": False,
             "gradient_accumulation_fusion": False, "masked_softmax_fusion": False, "persist_layer_norm": False,
             "bias_dropout_fusion": False, **fusions}
    config = TransformerConfig(
        num_layers=2, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4, num_query_groups=2,
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        hidden_dropout=0.0, attention_dropout=0.0, cross_entropy_fusion_impl="native", **flags,
        bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32,
    )
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    return GPTModel(config, spec, vocab_size=VOCAB, max_sequence_length=SEQ, position_embedding_type="rope",
                    share_embeddings_and_output_weights=False)


def forward_backward(model):
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    position_ids = torch.arange(SEQ).expand(BATCH, SEQ)
    loss = model(tokens, position_ids, None, labels=labels)  # [b, s], causal attention by flag
    loss.sum().backward()
    return loss.detach()


def loss_and_grads(model):
    loss = forward_backward(model)
    return loss, {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def compare(fused_flags: dict, bf16: bool = False) -> dict:
    ref_loss, ref_grads = loss_and_grads(build(bf16=bf16))
    model = build(bf16=bf16, **fused_flags)
    loss, grads = loss_and_grads(model)
    return {
        "flags": {k: getattr(model.config, k) for k in fused_flags},
        "loss": ref_loss.float().sum().item(),
        "loss_diff": (loss.float() - ref_loss.float()).abs().max().item(),
        "grad_diff": max((grads[n].float() - g.float()).abs().max().item() for n, g in ref_grads.items()),
        "grad_scale": max(g.float().abs().max().item() for g in ref_grads.values()),
    }


def fusions() -> dict:
    from megatron.core.models.common.embeddings import rope_torch_fused, rope_utils

    results = {
        "bias-swiglu": compare({"bias_activation_fusion": True}),
        "rope": compare({"apply_rope_fusion": True}),
        "cross-entropy native": compare({"cross_entropy_loss_fusion": True}),
        "cross-entropy native bf16": compare({"cross_entropy_loss_fusion": True}, bf16=True),
        "all": compare({"bias_activation_fusion": True, "apply_rope_fusion": True, "cross_entropy_loss_fusion": True}),
    }
    results["rope_is_torch_form"] = rope_utils.fused_apply_rotary_pos_emb is rope_torch_fused.torch_fused_apply_rotary_pos_emb
    # cos/sin computed once for every layer and call of a forward: the rotary embedding caches freqs.
    calls = []
    real_cos = torch.cos

    def counting_cos(*args, **kwargs):
        calls.append(1)
        return real_cos(*args, **kwargs)

    model = build(apply_rope_fusion=True)
    torch.cos = counting_cos
    try:
        loss_and_grads(model)
        first = len(calls)
        loss_and_grads(model)
    finally:
        torch.cos = real_cos
    results["rope_cos_calls"] = [first, len(calls) - first]

    # RMSNorm goes through torch.nn.functional.rms_norm (the norm of the local spec without apex).
    norm_calls = []
    real_rms_norm = F.rms_norm

    def counting_rms_norm(*args, **kwargs):
        norm_calls.append(1)
        return real_rms_norm(*args, **kwargs)

    model = build()
    F.rms_norm = counting_rms_norm
    try:
        loss_and_grads(model)
    finally:
        F.rms_norm = real_rms_norm
    results["rms_norm_calls"] = len(norm_calls)  # 2 per layer + the final norm
    results["norm_class"] = type(model.decoder.final_layernorm).__name__
    return results


def optimizer() -> dict:
    """The optimizer Megatron builds without TE/apex: torch AdamW, fused on this device, two steps."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    result = {}
    for distributed in (False, True):
        model = build()
        ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(use_distributed_optimizer=distributed), model)
        opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, use_distributed_optimizer=distributed), [ddp])
        inner = opt.optimizer if not hasattr(opt, "chained_optimizers") else opt.chained_optimizers[0].optimizer
        losses = []
        for _ in range(2):
            ddp.zero_grad_buffer()
            opt.zero_grad()
            losses.append(forward_backward(ddp).sum().item())
            ddp.finish_grad_sync()
            opt.step()
        steps = {float(s["step"]) for s in inner.state.values()}
        result["distributed" if distributed else "local"] = {
            "class": type(inner).__name__, "fused": inner.defaults.get("fused"), "foreach": inner.defaults.get("foreach"),
            "losses": losses, "steps": sorted(steps),
        }
    return result


def jit_fuser() -> dict:
    """What jit_fuser is at import (run first, in a process of its own): torch.compile, or the no-op
    decorator and one warning where Inductor has no compiler (jit-fuser-fallback)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from megatron.core import jit
    return {"fuser": getattr(jit.jit_fuser, "__name__", repr(jit.jit_fuser)),
            "warnings": [str(w.message) for w in caught if str(w.message).startswith("torch.compile cannot")]}


def run(group: str) -> dict:
    if group == "jit_fuser":
        return {"jit_fuser": jit_fuser()}
    setup(Path(os.getcwd()))
    return {name: globals()[name]() for name in group.split(",")}
