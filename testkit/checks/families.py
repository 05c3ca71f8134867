"""Child side of test_moe_ep.py, test_mla.py and test_mtp.py: the pieces DeepSeek-, Qwen3- and Mixtral-shaped models need on
the CPU path, checked in one process per group (testkit/child.py: NVIDIA-only modules and
triton refused, the patched tree first on sys.path). Returns plain values; the assertions live in
those files. Groups:
- alltoall_ep2: one of two gloo ranks (RANK, WORLD_SIZE=2, MASTER_ADDR/PORT from the test), expert
  parallel 2: MoEAlltoAllTokenDispatcher dispatches every token to its two experts across the
  ranks and combines them back (identity experts weighted by their routing probabilities);
- mla: validate_args of a multi-latent-attention command line (which fusions go off), then
  MLASelfAttention with YaRN RoPE built and run forward and backward on the CPU, and the local
  DotProductAttention with different query/key and value head sizes against plain math;
- mtp: MTPLossLoggingHelper records a multi-token prediction loss on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def check_alltoall_ep2() -> dict:
    import torch
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

    rank = int(os.environ["RANK"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        parallel_state.initialize_model_parallel(expert_model_parallel_size=2)
        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, num_moe_experts=4,
                                   moe_router_topk=2, moe_token_dispatcher_type="alltoall",
                                   expert_model_parallel_size=2, use_cpu_initialization=True)
        dispatcher = MoEAlltoAllTokenDispatcher(2, [2 * rank, 2 * rank + 1], config,
                                                pg_collection=ProcessGroupCollection.use_mpu_process_groups())
        generator = torch.Generator().manual_seed(rank)
        tokens = torch.randn(6, 8, generator=generator)
        top = torch.randn(6, 4, generator=generator).topk(2, dim=-1)
        routing_map = torch.zeros(6, 4, dtype=torch.bool).scatter(1, top.indices, True)
        probs = torch.zeros(6, 4).scatter(1, top.indices, top.values.softmax(dim=-1))
        result = {"rank": rank, "error": None}
        try:
            hidden, permuted_probs = dispatcher.dispatch_preprocess(tokens, routing_map, probs)
            hidden, permuted_probs = dispatcher.token_dispatch(hidden, permuted_probs)
            hidden, tokens_per_expert, permuted_probs = dispatcher.dispatch_postprocess(hidden, permuted_probs)
            expert_output = hidden * permuted_probs.unsqueeze(-1)
            output = dispatcher.combine_postprocess(dispatcher.token_combine(dispatcher.combine_preprocess(expert_output)))
            result.update(tokens_per_expert=[int(n) for n in tokens_per_expert],
                          max_err=float((output.reshape(tokens.shape) - tokens).abs().max()))
        except Exception as exc:  # noqa: BLE001 - the error is the result
            result["error"] = error_text(exc)
        return result
    finally:
        torch.distributed.destroy_process_group()


MLA_ARGV = [
    "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "2",
    "--train-iters", "2", "--lr", "1e-3", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
    "--swiglu", "--disable-bias-linear", "--bf16", "--mock-data", "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "128", "--multi-latent-attention", "--q-lora-rank", "32", "--kv-lora-rank", "16",
    "--qk-head-dim", "16", "--qk-pos-emb-head-dim", "8", "--v-head-dim", "16", "--rotary-scaling-factor", "40",
    "--mscale", "1.0", "--mscale-all-dim", "1.0", "--qk-layernorm",
]


def check_mla() -> dict:
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.spec_utils import build_module
    from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args

    result = {}
    os.environ.update(RANK="0", WORLD_SIZE="1")
    sys.argv = list(MLA_ARGV)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args = parse_args()
        validate_args(args)
    result["warnings"] = [line for line in out.getvalue().splitlines() if line.startswith("WARNING: ")]
    result["apply_rope_fusion"] = args.apply_rope_fusion

    torch.distributed.init_process_group("gloo", init_method=f"file://{os.getcwd()}/mla-store", rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel()
        model_parallel_cuda_manual_seed(1234)
        config = core_transformer_config_from_args(args)
        config.params_dtype = torch.float32  # the math reference below is fp32
        config.bf16 = False
        result["rope_type"] = config.rope_type
        spec = get_gpt_layer_local_spec(multi_latent_attention=True, qk_layernorm=True)
        attention_spec = spec.submodules.self_attention
        try:
            attention = build_module(attention_spec, config=config, layer_number=1)
            hidden = torch.randn(32, 2, 64, requires_grad=True)  # [s, b, h]
            output, _ = attention(hidden, attention_mask=None)
            output.sum().backward()
            result["mla"] = {"error": None, "core": type(attention.core_attention).__name__,
                             "rotary": type(attention.rotary_pos_emb).__name__, "shape": list(output.shape),
                             "finite": bool(torch.isfinite(output).all() and torch.isfinite(hidden.grad).all())}
        except Exception as exc:  # noqa: BLE001
            result["mla"] = {"error": error_text(exc)}

        # DeepSeek-V2-Lite's attention: no query latent, the key-value latent normed (mla-local-no-q-lora).
        config.q_lora_rank = None
        try:
            attention = build_module(attention_spec, config=config, layer_number=1)
            hidden = torch.randn(32, 2, 64, requires_grad=True)
            output, _ = attention(hidden, attention_mask=None)
            output.sum().backward()
            result["mla_without_q_lora"] = {
                "error": None, "q_proj": type(attention.linear_q_proj).__name__,
                "q_norm": type(getattr(attention, "q_layernorm", None)).__name__,
                "kv_norm": type(attention.kv_layernorm).__name__, "shape": list(output.shape),
                "finite": bool(torch.isfinite(output).all() and torch.isfinite(hidden.grad).all())}
        except Exception as exc:  # noqa: BLE001
            result["mla_without_q_lora"] = {"error": error_text(exc)}
        config.q_lora_rank = 32

        # Query/key heads of 24 (16 + 8), value heads of 16, as MLASelfAttention builds it.
        query, key = torch.randn(2, 32, 2, 4, 24).unbind(0)
        value = torch.randn(32, 2, 4, 16)
        scale = 24 ** -0.5
        scores = torch.einsum("sbnd,tbnd->bnst", query, key) * scale
        scores = scores.masked_fill(torch.ones(32, 32, dtype=torch.bool).triu(1), float("-inf"))
        expected = torch.einsum("bnst,tbnd->sbnd", F.softmax(scores, dim=-1), value).reshape(32, 2, 64)
        paths = {}
        for backend in ("auto", "unfused"):
            config.attention_backend = getattr(type(config.attention_backend), backend)
            core = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal,
                                       attention_type="self", attention_dropout=0.0, softmax_scale=scale,
                                       k_channels=24, v_channels=16)
            context = core(query, key, value, attention_mask=None)
            paths[backend] = {"sdpa": bool(getattr(core, "use_sdpa", False)), "shape": list(context.shape),
                              "max_err": float((context - expected).abs().max())}
        # SDPA's flash kernel alone (mla-sdpa-value-pad pads the values to the query/key head size;
        # without it: "No available kernel").
        from torch.nn.attention import SDPBackend, sdpa_kernel

        config.attention_backend = type(config.attention_backend).auto
        core = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self",
                                   attention_dropout=0.0, softmax_scale=scale, k_channels=24, v_channels=16)
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                context = core(query, key, value, attention_mask=None)
            paths["flash"] = {"sdpa": core.use_sdpa, "shape": list(context.shape),
                              "max_err": float((context - expected).abs().max())}
        except RuntimeError as exc:
            paths["flash"] = {"error": error_text(exc)}
        result["dot_product_attention"] = paths
        plain = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self")
        result["default_heads"] = [plain.hidden_size_per_attention_head, plain.hidden_size_per_partition]
        result["kv_channels"] = config.kv_channels
    finally:
        torch.distributed.destroy_process_group()
    return result


def check_mtp() -> dict:
    import torch
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper

    try:
        if hasattr(MTPLossLoggingHelper, "save_metrics_to_tracker"):  # with the accuracy counts
            MTPLossLoggingHelper.save_metrics_to_tracker(torch.tensor(2.5), torch.tensor(3.0), torch.tensor(4.0),
                                                      layer_number=0, num_layers=1)
            values = MTPLossLoggingHelper.tracker["loss_values"]
        else:  # trees before them track the loss alone, under "values"
            MTPLossLoggingHelper.save_loss_to_tracker(torch.tensor(2.5), layer_number=0, num_layers=1)
            values = MTPLossLoggingHelper.tracker["values"]
        return {"error": None, "device": values.device.type, "loss_values": values.tolist()}
    except Exception as exc:  # noqa: BLE001
        return {"error": error_text(exc)}


CHECKS = {"alltoall_ep2": check_alltoall_ep2, "mla": check_mla, "mtp": check_mtp}


def run(groups: str) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    return {group: CHECKS[group]() for group in groups.split(",")}
