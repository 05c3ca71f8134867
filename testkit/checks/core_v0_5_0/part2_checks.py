"""Checks of the part-2 series, run by child.py in a child process whose first sys.path entry is a
patched tree.

Each check returns a short detail string or raises; a group's result is
{name: {"ok": bool, "detail": str}} so that pytest reports every check on its own.
Everything runs on CPU, in fp32 and bf16, against plain torch references.
"""

from __future__ import annotations

import os
import traceback
import warnings

import torch
import torch.nn.functional as F

GROUPS: dict[str, dict] = {"core": {}, "upstream": {}, "training_core": {}, "training": {}}


def check(group):
    def register(fn):
        GROUPS[group][fn.__name__.removeprefix("check_")] = fn
        return fn

    return register


def close(actual, expected, dtype, what):
    atol, rtol = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (5e-2, 2e-2)}[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def grads_close(out, ref, dtype, leaves):
    """One random gradient back through `out` and its float64 reference `ref`; then the gradient of
    each leaf against its reference leaf's: {what: (leaf, reference leaf)}."""
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    for what, (leaf, ref_leaf) in leaves.items():
        close(leaf.grad, ref_leaf.grad, dtype, f"{what} grad")


def init_gloo():
    """One process, gloo, all parallel sizes 1: what a CPU CI machine can do."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    if not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        parallel_state.initialize_model_parallel(1, 1)
        model_parallel_cuda_manual_seed(1234)


def core_config(**overrides):
    from megatron.core.transformer.transformer_config import TransformerConfig

    values = dict(
        num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
        hidden_dropout=0.0, attention_dropout=0.0,
    )
    values.update(overrides)
    return TransformerConfig(**values)


# ---------------------------------------------------------------- megatron/core, on CPU


@check("core")
def check_layer_norm():
    from megatron.core.fusions.fused_layer_norm import FusedLayerNorm

    init_gloo()
    for dtype in (torch.float32, torch.bfloat16):
        for zero_centered in (False, True):
            config = core_config(layernorm_zero_centered_gamma=zero_centered)
            config.sequence_parallel = True  # the config refuses it at TP=1; the attribute must follow
            norm = FusedLayerNorm(config, 64, eps=1e-5)
            assert norm.weight.sequence_parallel and norm.bias.sequence_parallel
            assert set(dict(norm.named_parameters())) == {"weight", "bias"}
            with torch.no_grad():
                norm.weight.uniform_(-0.5, 0.5)
                norm.bias.uniform_(-0.5, 0.5)
            x = torch.randn(8, 2, 64, dtype=dtype, requires_grad=True)
            out = norm(x)
            assert out.dtype == dtype
            ref_w = norm.weight.detach().double().requires_grad_()
            ref_b = norm.bias.detach().double().requires_grad_()
            ref_x = x.detach().double().requires_grad_()
            ref = F.layer_norm(ref_x, (64,), ref_w + 1 if zero_centered else ref_w, ref_b, 1e-5)
            close(out, ref, dtype, f"forward {dtype} zero_centered={zero_centered}")
            grads_close(out, ref, dtype, {"input": (x, ref_x), "weight": (norm.weight, ref_w), "bias": (norm.bias, ref_b)})
    # fp32 activations with bf16 parameters (--fp32-residual-connection) must not be refused.
    norm = FusedLayerNorm(core_config(params_dtype=torch.bfloat16), 64).bfloat16()
    assert norm(torch.randn(4, 64)).dtype == torch.float32
    return "fp32/bf16, zero-centred gamma, sequence_parallel attribute"


@check("core")
def check_rms_norm():
    from megatron.core.fusions.fused_layer_norm import FusedLayerNorm

    init_gloo()
    for dtype in (torch.float32, torch.bfloat16):
        for zero_centered in (False, True):
            config = core_config(normalization="RMSNorm", layernorm_zero_centered_gamma=zero_centered)
            norm = FusedLayerNorm(config, 64, eps=1e-6)
            assert norm.bias is None and set(dict(norm.named_parameters())) == {"weight"}
            assert hasattr(norm.weight, "sequence_parallel")
            with torch.no_grad():
                norm.weight.uniform_(-0.5, 0.5)
            x = torch.randn(8, 2, 64, dtype=dtype, requires_grad=True)
            out = norm(x)
            ref_w = norm.weight.detach().double().requires_grad_()
            ref_x = x.detach().double().requires_grad_()
            gamma = ref_w + 1 if zero_centered else ref_w
            ref = ref_x * torch.rsqrt(ref_x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
            close(out, ref, dtype, f"forward {dtype}")
            grads_close(out, ref, dtype, {"input": (x, ref_x), "weight": (norm.weight, ref_w)})
    return "fp32/bf16 vs x*rsqrt(mean(x^2)+eps)*w, no bias"


@check("core")
def check_grad_accumulation_fallback():
    from megatron.core.tensor_parallel.layers import (
        ColumnParallelLinear,
        RowParallelLinear,
        linear_with_grad_accumulation_and_async_allreduce,
    )

    init_gloo()
    config = core_config(gradient_accumulation_fusion=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        column = ColumnParallelLinear(64, 32, config=config, init_method=torch.nn.init.xavier_normal_)
        row = RowParallelLinear(32, 64, config=config, init_method=torch.nn.init.xavier_normal_,
                                bias=True, input_is_parallel=True, skip_bias_add=False)
    assert not column.gradient_accumulation_fusion and not row.gradient_accumulation_fusion
    assert any("gradient_accumulation_fusion is off" in str(w.message)
               and "--no-gradient-accumulation-fusion" in str(w.message) for w in caught), "no note naming the flag"
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(32, 64, dtype=dtype, requires_grad=True)
        weight.main_grad = torch.zeros(32, 64, dtype=torch.float32)
        x = torch.randn(6, 3, 64, dtype=dtype, requires_grad=True)
        out = linear_with_grad_accumulation_and_async_allreduce(x, weight, None, True, False, False)
        grad = torch.randn_like(out)
        out.backward(grad)
        ref_w = weight.detach().clone().requires_grad_()
        ref_x = x.detach().clone().requires_grad_()
        F.linear(ref_x, ref_w).backward(grad)
        close(out, F.linear(x.detach(), weight.detach()), dtype, "forward")
        close(weight.grad, ref_w.grad, dtype, f"weight grad {dtype}")
        close(x.grad, ref_x.grad, dtype, f"input grad {dtype}")
    return "fusion requested without the extension: unfused weight grads equal F.linear's"


@check("core")
def check_rope():
    from megatron.core.models.common.embeddings import rotary_pos_embedding as rope

    init_gloo()
    assert not rope.HAVE_APPLY_ROPE_FUSION
    seq, heads, dim = 12, 3, 16
    emb = rope.RotaryEmbedding(kv_channels=dim, rotary_percent=1.0)
    freqs = emb(seq)
    assert freqs.shape == (seq, 1, 1, dim) and freqs.device.type == "cpu"
    config = core_config(apply_rope_fusion=True)
    for dtype in (torch.float32, torch.bfloat16):
        t = torch.randn(seq, 2, heads, dim, dtype=dtype)
        out = rope.apply_rotary_pos_emb(t, freqs, config)
        # manual rotate-half: x*cos + [-x2, x1]*sin, angles pos * base^(-2i/dim)
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        angles = torch.cat([angles, angles], dim=-1)[:, None, None, :]
        x = t.double()
        x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
        ref = x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()
        close(out, ref, dtype, f"rope {dtype}")
    assert config.apply_rope_fusion is False
    return "torch path vs manual rotate-half, fp32/bf16"


@check("core")
def check_checkpoint_round_trip():
    import argparse
    import tempfile
    from pathlib import Path

    import numpy as np

    from megatron.core.dist_checkpointing import serialization
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        common = {"args": argparse.Namespace(lr=1e-3), "rng": np.random.get_state(), "w": torch.ones(3)}
        torch.save(common, tmp / serialization.COMMON_STATE_FNAME)
        obj = ShardedObject("rng_state", None, (1,), (0,))
        shard = (tmp / obj.unique_key).with_suffix(".pt")
        shard.parent.mkdir(parents=True)
        torch.save({"numpy": np.random.get_state()}, shard)
        loaded = serialization.load_common_state_dict(tmp)  # torch's default weights_only refuses these
        assert loaded["args"].lr == 1e-3 and torch.equal(loaded["w"], common["w"])
        loaded_objects, _ = serialization.load_sharded_objects({"rng": obj}, tmp)
        assert loaded_objects["rng"]["numpy"][0] == "MT19937"
    return "common state and sharded objects with Namespace and numpy RNG state"


@check("core")
def check_gpt_trains_on_cpu():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    init_gloo()
    torch.manual_seed(0)
    config = core_config(
        normalization="RMSNorm", gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        ffn_hidden_size=128, gradient_accumulation_fusion=True, attention_dropout=0.1,
    )
    vocab, seq, batch = 128, 32, 4
    model = GPTModel(
        config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=vocab,
        max_sequence_length=seq, position_embedding_type="rope",
    )
    assert type(model.decoder.final_layernorm).__name__ != "TENorm"
    assert model.decoder.final_layernorm.bias is None  # RMSNorm
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(seq).expand(batch, seq)
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = model(tokens[:, :-1], positions, mask, labels=tokens[:, 1:]).mean()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert all(map(lambda v: v == v, losses)), losses
    assert losses[-1] < losses[0] - 0.1, losses
    state = model.state_dict()
    return f"local spec, RoPE, SwiGLU, RMSNorm: loss {losses[0]:.3f} -> {losses[-1]:.3f}; {len(state)} tensors"


@check("core")
def check_fallbacks_say_so_once():
    """Each fallback to a torch path is said once, naming the option: layer norm without apex
    (persist_layer_norm, memory_efficient_layer_norm), and Transformer Engine absent or broken."""
    import importlib
    import sys
    import tempfile

    from megatron.core.fusions.fused_layer_norm import FusedLayerNorm
    import megatron.core.transformer.custom_layers.transformer_engine as te_layers

    init_gloo()
    FusedLayerNorm._noted_ignored = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            FusedLayerNorm(core_config(persist_layer_norm=True, memory_efficient_layer_norm=True), 64)
    notes = [str(w.message) for w in caught if "ignored" in str(w.message)]
    assert len(notes) == 1 and "persist_layer_norm and memory_efficient_layer_norm" in notes[0], notes

    assert not te_layers.HAVE_TE and te_layers.TE_UNAVAILABLE == "Transformer Engine is not installed"
    try:
        te_layers.TELinear
        te_layers.te.pytorch.Linear()
    except ImportError as exc:
        assert "not installed" in str(exc) and "--spec local" in str(exc), exc
    # A Transformer Engine that is installed but fails to import is named as such, at once.
    blockers = [f for f in sys.meta_path if type(f).__name__ == "BlockNvidiaOnly"]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "transformer_engine"))
        with open(os.path.join(tmp, "transformer_engine", "__init__.py"), "w") as init:
            init.write("raise ImportError('libtransformer_engine.so: cannot open shared object file', "
                       "name='transformer_engine_torch')\n")
        for f in blockers:
            sys.meta_path.remove(f)
        sys.path.insert(0, tmp)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                broken = importlib.reload(te_layers)
            assert not broken.HAVE_TE and "installed but fails to import" in broken.TE_UNAVAILABLE, broken.TE_UNAVAILABLE
            assert "libtransformer_engine.so" in broken.TE_UNAVAILABLE
            assert any("fails to import" in str(w.message) for w in caught), [str(w.message) for w in caught]
        finally:
            sys.path.remove(tmp)
            sys.modules.pop("transformer_engine", None)
            sys.meta_path[:0] = blockers
            importlib.reload(te_layers)
    return "layer norm options ignored: one warning; TE absent vs installed-but-broken told apart"


@check("core")
def check_collectives_without_deprecation_warnings():
    from megatron.core.tensor_parallel import mappings
    from megatron.core.timers import Timers

    init_gloo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(4, 3)
        assert torch.equal(mappings._gather_along_first_dim(x), x)
        assert torch.equal(mappings._reduce_scatter_along_first_dim(x), x)
        timers = Timers(log_level=2, log_option="minmax")
        timers("step").start()
        timers("step").stop()
        timers.log(["step"], rank=0)
    deprecated = [f"{w.category.__name__}: {w.message}" for w in caught
                  if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert not deprecated, deprecated
    return "all-gather, reduce-scatter and the timers' all-gather print no deprecation warning"


# ---------------------------------------------------------------- the whole tree, on CPU


@check("upstream")
def check_checkpoint_load_and_failure():
    import argparse
    import tempfile

    import numpy as np

    from megatron import checkpointing

    # Before any process group: read_metadata() all-reduces on a 'cuda' tensor once one exists.
    assert not torch.distributed.is_initialized()
    with tempfile.TemporaryDirectory() as tmp:
        name = checkpointing.get_checkpoint_name(tmp, 7, pipeline_parallel=False, tensor_rank=0,
                                                 pipeline_rank=0, expert_parallel=False, expert_rank=0)
        os.makedirs(os.path.dirname(name))
        state = {"args": argparse.Namespace(num_layers=2), "iteration": 7,
                 "rng_state": [{"np_rng_state": np.random.get_state()}], "model": {"w": torch.ones(2)}}
        torch.save(state, name)
        with open(checkpointing.get_checkpoint_tracker_filename(tmp), "w") as tracker:
            tracker.write("7")
        loaded, loaded_name, release = checkpointing._load_base_checkpoint(tmp, rank0=True)
        assert loaded["iteration"] == 7 and loaded["args"].num_layers == 2 and not release
        with open(checkpointing.get_checkpoint_tracker_filename(tmp), "w") as tracker:
            tracker.write("seven")
        try:
            checkpointing._load_base_checkpoint(tmp, rank0=True)
        except SystemExit as exc:
            assert exc.code and "Invalid metadata file" in str(exc.code), f"exit status {exc.code!r}"
        else:
            raise AssertionError("an invalid tracker file loaded")
        with open(checkpointing.get_checkpoint_tracker_filename(tmp), "w") as tracker:
            tracker.write("7")
        with open(name, "wb") as broken:
            broken.write(b"not a checkpoint")
        try:
            checkpointing._load_base_checkpoint(tmp, rank0=True)
        except SystemExit as exc:
            raise AssertionError(f"a failed load exits the run silently (status {exc.code})")
        except Exception:
            pass
        else:
            raise AssertionError("a broken checkpoint loaded")
    return ("Namespace + numpy RNG state load under torch's default weights_only; a broken file raises, "
            "an invalid tracker file exits non-zero with the reason")


@check("upstream")
def check_sdpa_matches_core_attention():
    import megatron.model.transformer as legacy

    init_gloo()
    assert legacy.flash_attn_unpadded_func is None, "flash_attn is installed: this checks the SDPA path"
    from megatron.model.enums import AttnMaskType

    seq, batch, heads, dim = 32, 2, 4, 16
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    for dtype in (torch.float32, torch.bfloat16):
        config = core_config(
            hidden_size=heads * dim, num_attention_heads=heads, bf16=dtype == torch.bfloat16,
            params_dtype=dtype, apply_query_key_layer_scaling=False, masked_softmax_fusion=True,
        )
        core = legacy.CoreAttention(1, config, AttnMaskType.causal)
        flash = legacy.FlashSelfAttention(causal=True, attention_dropout=0.0)
        q, k, v = (torch.randn(seq, batch, heads, dim, dtype=dtype) for _ in range(3))
        expected = core(q, k, v, mask)  # [s, b, h*d], the unfused softmax path
        actual = flash(*(x.transpose(0, 1) for x in (q, k, v)))  # [b, s, h, d]
        actual = actual.transpose(0, 1).reshape(seq, batch, heads * dim)
        close(actual, expected, dtype, f"sdpa vs CoreAttention {dtype}")
    return "FlashSelfAttention without flash_attn (SDPA) == CoreAttention, fp32/bf16, causal"


@check("upstream")
def check_legacy_group_query_attention():
    """0110 legacy-gqa: the legacy ParallelAttention with 2 query groups for 4 heads equals the
    same attention with 4 groups whose key/value heads are copies of their group's."""
    from types import SimpleNamespace

    import megatron.model.transformer as legacy
    from megatron import global_vars
    from megatron.model.enums import AttnMaskType

    init_gloo()
    seq, batch, heads, groups, dim = 16, 2, 4, 2, 8
    per_group = heads // groups
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    config = core_config(hidden_size=heads * dim, num_attention_heads=heads, add_bias_linear=False,
                         apply_query_key_layer_scaling=False, masked_softmax_fusion=False)
    details = []
    for flash in (False, True):  # CoreAttention, and the SDPA path of --use-flash-attn
        def attention(query_groups):
            global_vars.set_args(SimpleNamespace(
                group_query_attention=query_groups != heads, num_query_groups=query_groups,
                kv_channels=dim, num_attention_heads=heads, use_flash_attn=flash,
                add_bias_linear=False, add_qkv_bias=False))
            return legacy.ParallelAttention(config, 1, attn_mask_type=AttnMaskType.causal)

        torch.manual_seed(0)
        gqa, mha = attention(groups), attention(heads)
        # GQA rows per group: [q of its per_group heads, k, v]; MHA rows per head: [q, k, v].
        gqa_rows = gqa.query_key_value.weight.detach().view(groups, per_group + 2, dim, -1)
        mha_rows = torch.stack([torch.stack([gqa_rows[h // per_group, h % per_group],
                                             gqa_rows[h // per_group, per_group],
                                             gqa_rows[h // per_group, per_group + 1]]) for h in range(heads)])
        with torch.no_grad():
            mha.query_key_value.weight.copy_(mha_rows.reshape(mha.query_key_value.weight.shape))
            mha.dense.weight.copy_(gqa.dense.weight)
        hidden = torch.randn(seq, batch, heads * dim)
        expected, _ = mha(hidden, mask)
        actual, _ = gqa(hidden, mask)  # RuntimeError: view size is not compatible, before the patch
        close(actual, expected, torch.float32, f"GQA vs MHA with shared key/value heads (flash={flash})")
        details.append("SDPA" if flash else "CoreAttention")
    return f"{heads} heads in {groups} query groups == MHA with copied key/value heads: " + ", ".join(details)


@check("upstream")
def check_distributed_optimizer_step_round_trip():
    from megatron.optimizer.distrib_optimizer import DistributedOptimizer

    torch.manual_seed(0)
    model_params = [torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.randn(4))]

    def wrapper(main_params):
        """The part of a DistributedOptimizer that state_dict/load_state_dict read."""
        opt = DistributedOptimizer.__new__(DistributedOptimizer)
        opt.optimizer = torch.optim.AdamW([{"params": main_params}], lr=0.1, weight_decay=0.01)
        opt.grad_scaler, opt.fp16 = None, False
        opt.model_param_group_index_map = {p: (0, i) for i, p in enumerate(model_params)}
        opt.gbuf_ranges = [{torch.float32: [{"param_map": {
            p: {"gbuf_world": range(p.numel())} for p in model_params}}]}]
        return opt

    def step(opt, main_params, seed):
        grads = torch.Generator().manual_seed(seed)
        for p in main_params:
            p.grad = torch.randn(p.shape, generator=grads)
        opt.optimizer.step()

    mains = [p.detach().clone().requires_grad_() for p in model_params]
    first = wrapper(mains)
    for i in range(3):
        step(first, mains, i)
    saved = first.state_dict()
    assert all(group["step"] == 3 for group in saved["optimizer"]["param_groups"]), saved

    resumed_mains = [p.detach().clone().requires_grad_() for p in mains]
    resumed = wrapper(resumed_mains)
    resumed.load_state_dict(saved)
    for old, new in zip(mains, resumed_mains):  # what load_parameter_state() restores
        for key in ("exp_avg", "exp_avg_sq"):
            resumed.optimizer.state[new][key].copy_(first.optimizer.state[old][key])
    step(first, mains, 3)
    step(resumed, resumed_mains, 3)  # KeyError 'step' before the patch
    for old, new in zip(mains, resumed_mains):
        assert float(resumed.optimizer.state[new]["step"]) == 4
        torch.testing.assert_close(new, old)
    return "state_dict/load_state_dict keep torch AdamW's step; the resumed step matches"


# ---------------------------------------------------------------- 0109 cpu-training, megatron/core


@check("training_core")
def check_ddp_grad_buffer_on_cpu():
    import contextlib
    import copy

    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel

    init_gloo()
    cases = ((torch.float32, False, False), (torch.bfloat16, True, False), (torch.float32, True, True))
    for dtype, overlap, distopt in cases:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.GELU(), torch.nn.Linear(24, 8))
        # An expert-parallel parameter has its own main_grad (not with overlap_grad_reduce at
        # the pin: its hook looks for a grad buffer it does not have).
        module.register_parameter("expert", torch.nn.Parameter(torch.randn(8)))
        module.expert.allreduce = overlap
        reference = copy.deepcopy(module)
        module.to(dtype)
        ddp = DistributedDataParallel(
            core_config(), module, parallel_state.get_data_parallel_group(),
            accumulate_allreduce_grads_in_fp32=True, overlap_grad_reduce=overlap,
            use_distributed_optimizer=distopt,
        )
        buffers = list(ddp.grad_buffers.values())
        assert buffers and all(b.data.device.type == "cpu" and b.data.dtype == torch.float32 for b in buffers)
        assert module.expert.main_grad.device.type == "cpu"
        assert overlap or not any(module.expert is p for p in ddp.param_to_grad_buffer)
        ddp.zero_grad_buffer(zero_buffer=True)
        batches = [torch.randn(5, 16, generator=torch.Generator().manual_seed(i)) for i in range(2)]
        for i, x in enumerate(batches):  # two micro-batches accumulate into the buffer
            with ddp.no_sync() if i == 0 else contextlib.nullcontext():
                (ddp(x.to(dtype)) * module.expert).sum().backward()
            (reference(x) * reference.expert).sum().backward()
        ddp.finish_grad_sync()  # all-reduce (or reduce-scatter) over gloo
        for (name, param), ref in zip(module.named_parameters(), reference.parameters()):
            assert param.grad is None, name
            close(param.main_grad, ref.grad, dtype, f"main_grad {name} {dtype} overlap={overlap} distopt={distopt}")
    return "grad buffers and expert main_grad on CPU; 2 micro-batches, sync/overlap/distopt over gloo"


@check("training_core")
def check_timers_on_cpu():
    import time

    from megatron.core.timers import Timers

    init_gloo()
    timers = Timers(log_level=2, log_option="minmax")
    timers("step", log_level=0).start(barrier=True)
    time.sleep(0.02)
    timers("step").stop(barrier=True)
    text = timers.get_all_timers_string(names=["step"], barrier=True)
    assert text and "step" in text, text
    elapsed = timers._get_elapsed_time_all_ranks(["step"], reset=False, barrier=False)
    assert elapsed.device.type == "cpu" and elapsed.shape == (1, 1), elapsed
    return text.strip().splitlines()[-1].strip()


# ---------------------------------------------------------------- 0109 cpu-training, whole tree


def optimizer_args(**overrides):
    """What get_megatron_optimizer and MegatronOptimizer.step read of Megatron's arguments."""
    from types import SimpleNamespace

    values = dict(
        optimizer="adam", lr=1e-2, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8,
        sgd_momentum=0.9, clip_grad=1.0, log_num_zeros_in_grad=True, check_for_nan_in_loss_and_grad=True,
        use_distributed_optimizer=False, fp16=False, bf16=False, loss_scale=None,
        initial_loss_scale=2.0 ** 10, min_loss_scale=1.0, loss_scale_window=1000, hysteresis=1,
        params_dtype=torch.float32, barrier_with_L1_time=True,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def reference_optimizer(kind, megatron_groups, args):
    """A plain torch optimizer over fp32 copies of Megatron's main params, group by group."""
    groups = []
    for group in megatron_groups:
        params = [p.detach().clone().float().requires_grad_() for p in group["params"]]
        groups.append({"params": params, "weight_decay": group["weight_decay"]})
    if kind == "adam":
        return torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)
    return torch.optim.SGD(groups, lr=args.lr, momentum=args.sgd_momentum)


@check("training")
def check_megatron_optimizer_steps():
    from megatron import global_vars
    from megatron.core.timers import Timers
    from megatron.optimizer import get_megatron_optimizer
    from megatron.optimizer.optimizer import Float16OptimizerWithFloat16Params, FP32Optimizer

    init_gloo()
    timers = Timers(log_level=2, log_option="minmax")
    details = []
    for kind in ("adam", "sgd"):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            args = optimizer_args(optimizer=kind, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
                                  params_dtype=dtype, loss_scale=128.0 if dtype == torch.float16 else None)
            global_vars.set_args(args)
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.LayerNorm(20), torch.nn.Linear(20, 6)).to(dtype)
            optimizer = get_megatron_optimizer([model])
            expected = FP32Optimizer if dtype == torch.float32 else Float16OptimizerWithFloat16Params
            assert type(optimizer) is expected, type(optimizer)
            for group in optimizer.optimizer.param_groups:  # what OptimizerParamScheduler sets
                group["weight_decay"] = args.weight_decay * group["wd_mult"]
            main_params = [p for g in optimizer.optimizer.param_groups for p in g["params"]]
            assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in main_params)
            reference = reference_optimizer(kind, optimizer.optimizer.param_groups, args)
            ref_params = [p for g in reference.param_groups for p in g["params"]]
            # The model params in the order of the main params (grouped by weight decay).
            model_params = main_params if dtype == torch.float32 else \
                [p for g in optimizer.float16_groups for p in g]
            scale = args.loss_scale or 1.0
            for step in range(3):
                grads = torch.Generator().manual_seed(10 + step)
                for param, ref in zip(model_params, ref_params):
                    grad = torch.randn(param.shape, generator=grads) * (3.0 if step == 0 else 0.05)
                    param.main_grad = grad * scale  # what the DDP grad buffer holds
                    ref.grad = grad.clone()
                success, grad_norm, zeros = optimizer.step(args, timers)
                ref_norm = torch.nn.utils.clip_grad_norm_(ref_params, args.clip_grad)
                reference.step()
                assert success and zeros == 0, (success, zeros)
                assert abs(grad_norm - ref_norm.item()) <= 1e-4 * ref_norm.item(), (grad_norm, ref_norm)
                for main, ref in zip(main_params, ref_params):
                    close(main, ref, torch.float32, f"{kind} {dtype} step {step} main param")
                for param, ref in zip(model_params, ref_params):
                    close(param, ref.to(dtype), dtype, f"{kind} {dtype} step {step} model param")
            details.append(f"{kind}/{str(dtype).removeprefix('torch.')}")
    # fp16, dynamic loss scale: an overflow skips the step and halves the scale.
    args = optimizer_args(fp16=True, params_dtype=torch.float16)
    global_vars.set_args(args)
    model = torch.nn.Linear(4, 4).half()
    optimizer = get_megatron_optimizer([model])
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.main_grad = torch.full(p.shape, float("inf"))
    success, _, _ = optimizer.step(args, timers)
    assert not success and optimizer.get_loss_scale().item() == 2.0 ** 9, optimizer.get_loss_scale()
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    return "vs torch AdamW/SGD + clip_grad_norm_, 3 steps: " + ", ".join(details) + "; fp16 overflow skipped"


def apex_fused_adam_layout(torch_state, step):
    """A torch AdamW state dict as apex FusedAdam wrote it: the step once per param group, with
    bias_correction, and only exp_avg/exp_avg_sq per parameter."""
    groups = [{key: group[key] for key in ("params", "lr", "betas", "eps", "weight_decay", "wd_mult", "lr_mult")}
              | {"bias_correction": True, "step": step} for group in torch_state["param_groups"]]
    state = {index: {key: s[key] for key in ("exp_avg", "exp_avg_sq")} for index, s in torch_state["state"].items()}
    return {"state": state, "param_groups": groups}


@check("training")
def check_apex_fused_adam_checkpoint_resumes():
    import tempfile

    from megatron import checkpointing, global_vars
    from megatron.core.timers import Timers
    from megatron.optimizer import get_megatron_optimizer

    init_gloo()
    timers = Timers(log_level=2, log_option="minmax")

    def model_and_optimizer(args, seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.Linear(12, 4)).to(args.params_dtype)
        optimizer = get_megatron_optimizer([model])
        for group in optimizer.optimizer.param_groups:
            group["weight_decay"] = args.weight_decay * group["wd_mult"]
        return model, optimizer

    def step(model, optimizer, args, seed):
        grads = torch.Generator().manual_seed(seed)
        for param in model.parameters():
            param.main_grad = torch.randn(param.shape, generator=grads)
        assert optimizer.step(args, timers)[0]

    details = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (torch.float32, torch.bfloat16):
            args = optimizer_args(
                bf16=dtype == torch.bfloat16, params_dtype=dtype, load=tmp, finetune=False, no_load_optim=False,
                no_load_rng=True, consumed_train_samples=0, consumed_valid_samples=0, retro_add_retriever=False,
                transformer_impl="local", exit_on_missing_checkpoint=False, fp16=False,
            )
            global_vars.set_args(args)
            first, first_opt = model_and_optimizer(args, 0)
            for i in range(2):
                step(first, first_opt, args, i)
            saved = first_opt.state_dict()
            if dtype == torch.float32:
                saved = apex_fused_adam_layout(saved, 2)
            else:
                saved["optimizer"] = apex_fused_adam_layout(saved["optimizer"], 2)
            name = checkpointing.get_checkpoint_name(tmp, 2)
            os.makedirs(os.path.dirname(name), exist_ok=True)
            torch.save({"iteration": 2, "checkpoint_version": 3.0, "model": first.state_dict(), "optimizer": saved}, name)
            with open(checkpointing.get_checkpoint_tracker_filename(tmp), "w") as tracker:
                tracker.write("2")

            resumed, resumed_opt = model_and_optimizer(args, 1)
            iteration, _ = checkpointing.load_checkpoint([resumed], resumed_opt, None)  # KeyError 'step' before
            assert iteration == 2, iteration
            step(first, first_opt, args, 2)
            step(resumed, resumed_opt, args, 2)
            for p in resumed_opt.optimizer.param_groups[0]["params"]:
                assert float(resumed_opt.optimizer.state[p]["step"]) == 3, resumed_opt.optimizer.state[p]
            for old, new in zip(first.parameters(), resumed.parameters()):
                torch.testing.assert_close(new, old)

            # A checkpoint whose optimizer state cannot be loaded stops the run with an error.
            torch.save({"iteration": 2, "checkpoint_version": 3.0, "model": first.state_dict()}, name)
            try:
                checkpointing.load_checkpoint([resumed], resumed_opt, None)
            except SystemExit as exc:
                raise AssertionError(f"a failed optimizer load exits with status {exc.code!r}")
            except RuntimeError as exc:
                assert "Unable to load optimizer" in str(exc) and "'optimizer'" in str(exc), exc
            else:
                raise AssertionError("a checkpoint without optimizer state loaded")
            details.append(str(dtype).removeprefix("torch."))
    return "apex FusedAdam layout (group step) resumes into torch AdamW and steps as the saved run: " + \
        ", ".join(details) + "; a missing optimizer state raises"


@check("training")
def check_clip_grad_norm_matches_torch():
    from megatron.optimizer.clip_grads import clip_grad_norm_fp32, count_zeros_fp32

    init_gloo()
    shapes = [(7, 5), (5,), (3, 4, 2)]
    for max_norm, norm_type, scale in ((1.0, 2, 10.0), (100.0, 2, 1.0), (0.5, float("inf"), 10.0)):
        gen = torch.Generator().manual_seed(3)
        params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
        refs = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for p, r in zip(params, refs):
            p.grad = torch.randn(p.shape, generator=gen) * scale
            p.grad[0] = 0.0
            r.grad = p.grad.clone()
        total = clip_grad_norm_fp32(params, [p.grad for p in params], max_norm, True, norm_type=norm_type)
        ref_total = torch.nn.utils.clip_grad_norm_(refs, max_norm, norm_type=norm_type)
        assert abs(total - ref_total.item()) <= 1e-5 * ref_total.item(), (total, ref_total)
        for p, r in zip(params, refs):
            close(p.grad, r.grad, torch.float32, f"clipped grad max_norm={max_norm} norm={norm_type}")
        zeros = count_zeros_fp32(params, model_parallel_group=None)
        expected = sum(int((p.grad == 0).sum()) for p in params)
        assert zeros == expected, (zeros, expected)
    total = clip_grad_norm_fp32([], [], 1.0, True)  # a rank with no gradients
    assert total == 0.0, total
    return "L2 and inf norms, clipping and no-op, vs torch.nn.utils.clip_grad_norm_; count_zeros_fp32"


def run(group: str) -> dict[str, dict]:
    results = {}
    for name, fn in GROUPS[group].items():
        try:
            results[name] = {"ok": True, "detail": fn() or ""}
        except BaseException:  # a check's failure is its result, whatever it is
            results[name] = {"ok": False, "detail": traceback.format_exc()[-3000:]}
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return results
