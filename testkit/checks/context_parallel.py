"""Child side of test_context_parallel.py: context parallelism without Transformer Engine
(cp-attention, cp-rope-cpu), as one of two gloo ranks (RANK, WORLD_SIZE=2, MASTER_ADDR/PORT from
the test; testkit/child.py: NVIDIA-only modules and triton refused, the patched tree first on
sys.path). Returns plain numbers; the assertions live in test_context_parallel.py. Groups:
- attention: context_parallel_attention over the two ranks' zigzag chunks against fp64 attention
  over the whole sequence (output and the query/key/value gradients), GQA, for each
  --cp-comm-type, causal and unmasked, each kernel; the blocks each rank computed;
- layer: one Llama-shaped TransformerLayer (local spec, RMSNorm, SwiGLU, GQA, RoPE) with context
  parallel 2 against the same layer over the whole sequence: output, input gradient and every
  parameter's gradient (summed over the two ranks, as the data-parallel reduction does);
- refusals: DotProductAttention's one-line refusals and its mask check;
- gpu_ops: the flash and memory-efficient kernels' calls (what a GPU runs) on meta tensors.
"""

from __future__ import annotations

import os

SEQ, BATCH, HEADS, GROUPS, HEAD_DIM = 16, 2, 4, 2, 8


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def zigzag(tensor, rank: int, size: int = 2, dim: int = 0):
    """This rank's chunks r and 2N-1-r of `tensor` along dim, as get_batch_on_this_cp_rank cuts."""
    import torch

    chunks = tensor.chunk(2 * size, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * size - 1 - rank]], dim=dim)


def max_err(a, b) -> float:
    return float((a.double() - b.double()).abs().max())


def check_attention(rank: int) -> dict:
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import context_parallel_attention as cpa

    group = torch.distributed.group.WORLD
    kinds, blocks = [], []
    real_kernel_forward = cpa.kernel_forward

    def recording(kind, native, q, k, *rest):
        kinds.append(kind)
        blocks.append([q.size(2), k.size(2), rest[1]])  # query rows, keys, causal
        return real_kernel_forward(kind, native, q, k, *rest)

    cpa.kernel_forward = recording
    cases = []
    # The last two: multi-latent attention's value heads, narrower than the query/key heads.
    variants = [(comm, causal, kernel, HEAD_DIM) for comm in ("p2p", "all_gather", "allgather")
                for causal in (True, False) for kernel in ("fused", "math")]
    variants += [("p2p", True, "fused", HEAD_DIM // 2), ("all_gather", True, "fused", HEAD_DIM // 2)]
    for comm, causal, kernel, value_dim in variants:
        generator = torch.Generator().manual_seed(7)
        full = [torch.randn(SEQ, BATCH, heads, dim, generator=generator, dtype=torch.float64)
                for heads, dim in ((HEADS, HEAD_DIM), (GROUPS, HEAD_DIM), (GROUPS, value_dim))]
        weight = torch.randn(SEQ, BATCH, HEADS * value_dim, generator=generator, dtype=torch.float64)
        ref_in = [t.clone().requires_grad_() for t in full]
        q, k, v = (t.permute(1, 2, 0, 3) for t in ref_in)
        groups = HEADS // GROUPS
        ref = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                             is_causal=causal, scale=0.3)
        ref = ref.permute(2, 0, 1, 3).reshape(SEQ, BATCH, -1)
        (ref * weight).sum().backward()
        mine = [zigzag(t, rank).float().requires_grad_() for t in full]
        del kinds[:], blocks[:]
        out = cpa.context_parallel_attention(*mine, group, cpa.normalized_comm_type(comm), causal, 0.3, kernel)
        (out.double() * zigzag(weight, rank)).sum().backward()
        cases.append({
            "case": f"{comm} {'causal' if causal else 'no mask'} {kernel}"
                    + (" mla" if value_dim != HEAD_DIM else ""),
            "out": max_err(out, zigzag(ref, rank)),
            "grads": [max_err(m.grad, zigzag(r.grad, rank)) for m, r in zip(mine, ref_in)],
            "kinds": sorted(set(kinds)),
            "blocks": list(blocks),
        })
    cpa.kernel_forward = real_kernel_forward
    return {"rank": rank, "cases": cases}


def check_layer(rank: int) -> dict:
    """The layer with the unfused RoPE and with --rope-fusion's torch form (rope-torch-fused): each
    takes the rank's slice of the embedding (get_pos_emb_on_this_cp_rank)."""
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(context_parallel_size=2)
    return {"rank": rank, **{name: layer_case(rank, fused) for name, fused in (("rope", False), ("fused rope", True))}}


def layer_case(rank: int, rope_fusion: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer

    model_parallel_cuda_manual_seed(1234)
    hidden = HEADS * HEAD_DIM
    config = TransformerConfig(
        num_layers=1, hidden_size=hidden, num_attention_heads=HEADS, num_query_groups=GROUPS,
        ffn_hidden_size=2 * hidden, normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, attention_dropout=0.0, hidden_dropout=0.0, context_parallel_size=2,
        use_cpu_initialization=True, bias_dropout_fusion=False, apply_rope_fusion=rope_fusion,
    )
    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    layer = TransformerLayer(config, spec.submodules, layer_number=1)
    cp_group = parallel_state.get_context_parallel_group()
    rope = RotaryEmbedding(HEAD_DIM, rotary_percent=1.0, rotary_base=10000, cp_group=cp_group)
    alone = [torch.distributed.new_group([r]) for r in range(2)][rank]  # every rank makes both
    core_attention = layer.self_attention.core_attention

    generator = torch.Generator().manual_seed(11)
    x = torch.randn(SEQ, BATCH, hidden, generator=generator)
    weight = torch.randn(SEQ, BATCH, hidden, generator=generator)

    fused_calls = []
    real_fused = rope_utils.fused_apply_rotary_pos_emb

    def counting(t, freqs, **kwargs):
        fused_calls.append(list(freqs.shape))
        return real_fused(t, freqs, **kwargs)

    def step(inputs, weights, rotary, cp):
        core_attention.cp_group = cp
        layer.zero_grad(set_to_none=True)
        inputs = inputs.clone().requires_grad_()
        out, _ = layer(inputs, attention_mask=None, rotary_pos_emb=rotary)
        (out * weights).sum().backward()
        grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
        return out.detach(), inputs.grad, grads

    rope_utils.fused_apply_rotary_pos_emb = counting
    try:
        out, x_grad, grads = step(zigzag(x, rank), zigzag(weight, rank), rope(SEQ), cp_group)
    finally:
        rope_utils.fused_apply_rotary_pos_emb = real_fused
    for grad in grads.values():
        torch.distributed.all_reduce(grad, group=cp_group)
    # the whole sequence's RoPE: one made with a one-rank group (trees before forward(cp_group=) take it only here)
    whole_rope = RotaryEmbedding(HEAD_DIM, rotary_percent=1.0, rotary_base=10000, cp_group=alone)
    ref_out, ref_x_grad, ref_grads = step(x, weight, whole_rope(SEQ), None)
    return {
        "cp_used": core_attention.cp_comm_type,
        "fused_rope_freqs": fused_calls,
        "out": max_err(out, zigzag(ref_out, rank)),
        "out_scale": float(ref_out.abs().max()),
        "input_grad": max_err(x_grad, zigzag(ref_x_grad, rank)),
        "param_grads": {name: max_err(grads[name], ref_grads[name]) for name in ref_grads},
        "param_grad_scale": max(float(g.abs().max()) for g in ref_grads.values()),
    }


def make_attention(group, cp_group, mask_type=None, **overrides):
    import torch
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    pgs = ProcessGroupCollection()
    pgs.tp, pgs.cp = group, cp_group
    cp_comm_type = overrides.pop("cp_comm_type", "p2p")
    attention_type = overrides.pop("attention_type", "self")
    cfg = {"num_layers": 2, "hidden_size": HEADS * HEAD_DIM, "num_attention_heads": HEADS,
           "num_query_groups": GROUPS, "attention_dropout": 0.0, "context_parallel_size": 2,
           "params_dtype": torch.float32, **overrides}
    return DotProductAttention(TransformerConfig(**cfg), layer_number=1, attn_mask_type=mask_type or AttnMaskType.causal,
                               attention_type=attention_type, cp_comm_type=cp_comm_type, pg_collection=pgs)


def check_refusals(rank: int) -> dict:
    import torch
    from megatron.core.transformer.enums import AttnBackend, AttnMaskType

    world = torch.distributed.group.WORLD
    alone = [torch.distributed.new_group([r]) for r in range(2)][rank]
    refused = {}
    variants = {
        "a2a": {"cp_comm_type": "a2a"},
        "a2a+p2p": {"cp_comm_type": "a2a+p2p"},
        "window": {"window_size": (8, 0)},
        "softmax offset": {"softmax_type": "off-by-one"},
        "attention dropout": {"attention_dropout": 0.1},
        "padding mask": {"mask_type": AttnMaskType.padding},
        "cross attention": {"attention_type": "cross"},
    }
    for name, overrides in variants.items():
        try:
            make_attention(alone, world, **overrides)
            refused[name] = None
        except ValueError as exc:
            refused[name] = str(exc)
    accepted = {}
    for comm in ("p2p", "all_gather", "allgather", None):
        module = make_attention(alone, world, cp_comm_type=comm)
        accepted[str(comm)] = [module.cp_comm_type, module.cp_kernel]
    accepted["unfused"] = make_attention(alone, world, attention_backend=AttnBackend.unfused).cp_kernel
    accepted["deterministic"] = make_attention(alone, world, deterministic_mode=True).cp_kernel

    # The dataloader's mask as get_batch_on_this_cp_rank cuts it (query rows of this rank's
    # chunks) gives what no mask gives; a document mask is refused.
    module = make_attention(alone, world)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(SEQ // 2, BATCH, HEADS, HEAD_DIM, generator=generator)
    k = torch.randn(SEQ // 2, BATCH, GROUPS, HEAD_DIM, generator=generator)
    v = torch.randn(SEQ // 2, BATCH, GROUPS, HEAD_DIM, generator=generator)
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(diagonal=1).expand(BATCH, 1, SEQ, SEQ)
    mine = zigzag(causal, rank, dim=2)
    with_mask = module(q, k, v, mine)
    without = module(q, k, v, None)
    document = causal.clone()
    document[:, :, SEQ // 2:, : SEQ // 2] = True  # a second document starts halfway
    try:
        module(q, k, v, zigzag(document, rank, dim=2))
        document_error = None
    except ValueError as exc:
        document_error = str(exc)
    return {
        "rank": rank, "refused": refused, "accepted": accepted,
        "causal_mask_err": max_err(with_mask, without),
        "document_error": document_error,
    }


def check_gpu_ops(rank: int) -> dict:
    """The GPU kernels' calls on meta tensors: their argument lists and shapes (the ops' meta
    functions check them as the CUDA/ROCm ones do; no numbers)."""
    import torch
    from megatron.core.transformer import context_parallel_attention as cpa

    results = {}
    # mla: value heads half the query/key head size (multi-latent attention), padded for the kernel.
    for kind, native, value_dim in (("flash", True, HEAD_DIM), ("flash", False, HEAD_DIM),
                                    ("efficient", False, HEAD_DIM), ("flash", True, HEAD_DIM // 2),
                                    ("efficient", False, HEAD_DIM // 2)):
        name = f"{kind} {'gqa' if native else 'repeated'}{' mla' if value_dim != HEAD_DIM else ''}"
        q = torch.empty(BATCH, HEADS, 24, HEAD_DIM, device="meta", dtype=torch.bfloat16)
        k = torch.empty(BATCH, GROUPS, 48, HEAD_DIM, device="meta", dtype=torch.bfloat16)
        v = torch.empty(BATCH, GROUPS, 48, value_dim, device="meta", dtype=torch.bfloat16)
        try:
            out, lse, record = cpa.kernel_forward(kind, native, q, k, v, False, 0.3)
            grads = cpa.block_backward(torch.empty_like(out), q, k, v, out, lse, False, 0.3, record)
            results[name] = {"out": list(out.shape), "lse": list(lse.shape), "grads": [list(g.shape) for g in grads]}
        except Exception as exc:  # noqa: BLE001 - the error is the result
            results[name] = {"error": error_text(exc)}
    return results


CHECKS = {"attention": check_attention, "layer": check_layer, "refusals": check_refusals, "gpu_ops": check_gpu_ops}


def run(groups: str) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        return {group: CHECKS[group](rank) for group in groups.split(",")}
    finally:
        torch.distributed.destroy_process_group()
