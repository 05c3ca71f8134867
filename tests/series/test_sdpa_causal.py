"""sdpa-causal: DotProductAttention's SDPA path (patch sdpa-attention) against its explicit path,
and what upstream's own pretrain_gpt.py hands to torch's SDPA.

CI: megatron/ of the pin from the release's wheel with the series up to and including
sdpa-attention (harness.Trees); one child process (testkit/checks/attention.py) runs every group on the
CPU and returns plain numbers. Full tree (ROCMPATCH_TEST_UPSTREAM): pretrain_gpt.py of the patched
tree, one process, two iterations of the tiny Llama (GQA: 4 query heads, 2 key/value groups) under
record_calls.py, which records the arguments of every scaled_dot_product_attention call. The same
Python code runs on a GPU, so these are the calls a GPU run makes.
"""

from __future__ import annotations

import json

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = [harness.releases_with("sdpa-causal"), pytest.mark.every_release]  # one child per release: cheap

PATCH = "sdpa-attention"
GROUPS = "compare,calls,scale_reference,dropout,selection"
FP32_ABS = 1e-5  # max |SDPA - explicit|, output and every input gradient
BF16_REL = 2e-2  # the same relative to the largest value, bf16
# The tiny Llama's attention as the flash kernels take it: causal by flag, no mask tensor, the
# two key/value groups as they are.
FAST = {"is_causal": True, "attn_mask": None, "enable_gqa": True, "q_heads": 4, "k_heads": 2}


@pytest.fixture(scope="session")
def attention_results(release, trees, tmp_path_factory) -> dict:
    tree = trees.wheel(release, release.patches(through=PATCH))
    assert (tree / "megatron/core/transformer/dot_product_attention.py").read_bytes() != \
        harness.wheel_files(release)["megatron/core/transformer/dot_product_attention.py"]
    return harness.run_checks("checks.attention", GROUPS, tree, tmp_path_factory.mktemp("attention-run"), timeout=300)


def test_sdpa_matches_explicit_forward_and_backward(attention_results):
    for case in attention_results["compare"]:
        name = case["case"]
        assert case["sdpa_used"] and not case["explicit_used_sdpa"], name
        assert case["finite"], name
        if "bf16" in name:
            assert case["out"] <= BF16_REL * case["out_scale"], case
            assert case["grad"] <= BF16_REL * case["grad_scale"], case
        else:
            assert case["out"] <= FP32_ABS and case["grad"] <= FP32_ABS, case
    names = " ".join(c["case"] for c in attention_results["compare"])
    for needed in ("causal", "dataloader mask", "reset-attention-mask", "padding", "fully masked", "gqa", "cross",
                   "decode", "layer scaling", "bf16"):
        assert needed in names


def test_causal_layers_reach_sdpa_with_is_causal_and_no_mask(attention_results):
    """What a GPU would run: the plain causal mask (pretrain_gpt.py's dataloader mask, or none)
    becomes is_causal=True with no mask tensor, as Transformer Engine does for the causal mask
    type, so the flash kernels can run; grouped key/value heads go in unrepeated (enable_gqa).
    Any other mask is applied as given, with the heads repeated for the memory-efficient kernel."""
    calls = attention_results["calls"]
    fast = {"is_causal": True, "attn_mask": None, "enable_gqa": True, "q_heads": 8, "k_heads": 2}
    assert calls["causal, no mask"] == [fast]
    assert calls["causal, dataloader mask"] == [fast]
    masked = {"is_causal": False, "attn_mask": [2, 1, 32, 32], "enable_gqa": False, "q_heads": 8, "k_heads": 8}
    assert calls["causal, --reset-attention-mask"] == [masked]
    assert calls["padding type, causal-looking mask"] == [masked]


def test_one_mask_check_per_micro_batch(attention_results):
    """Every layer gets the same mask tensor: it is compared with the causal mask once (one host
    sync on a GPU), and again only after it changed in place."""
    four = attention_results["calls"]["four layers, one mask"]
    assert four == {"compared": 1, "compared_after_change": 1, "causal_calls": [True, True, True, True, False]}


def test_scale_is_softmax_scale_times_layer_coefficient(attention_results):
    result = attention_results["scale_reference"]
    assert result["use_sdpa"]
    assert result["diff"] <= FP32_ABS


def test_dropout_under_the_model_parallel_rng_tracker(attention_results):
    result = attention_results["dropout"]
    assert result["use_sdpa"]
    assert result["forks"] == 1  # the dropout ran inside the tracker's fork()
    assert result["default_untouched"]  # and drew nothing from the default generator
    assert result["same_seed_equal"] and result["other_seed_differs"]
    # 64*64*8 = 32768 Bernoulli draws: 4 standard deviations of the keep rate is about 0.01.
    assert abs(result["keep_rate"] - result["expected_keep"]) < 0.015, result
    assert result["kept_value_err"] < 1e-6  # kept probabilities scaled by 1 / (1 - p)
    assert result["eval_no_dropout_err"] < 1e-6


def test_backend_selection_and_one_line_fallbacks(attention_results):
    result = attention_results["selection"]
    assert result["chosen"] == {"auto": True, "flash": True, "fused": True, "local": True, "unfused": False}
    assert result["windowed"] == [False, False]
    assert result["skipped_layer_sdpa"]  # a layer window_attn_skip_freq leaves unwindowed keeps SDPA
    assert not result["deterministic"]
    assert not result["unfused_windowed"]
    assert result["offsets"] == {
        "off-by-one": ["--softmax-type off-by-one", "SDPA has no softmax offset"],
        "learnable": ["--softmax-type learnable", "SDPA has no softmax offset"],
    }
    records = result["records"]
    # Two windowed layers and a third config with --window-size: one line; unfused says nothing.
    assert len(records) == 2, records
    assert records[0].startswith("--window-size: ") and "--attention-backend unfused" in records[0]
    assert records[1].startswith("--deterministic-mode: ")


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.mark.upstream
@pytest.mark.parametrize("mask_flag", ["", "--no-create-attention-mask-in-dataloader"], ids=["dataloader-mask", "no-mask"])
def test_pretrain_gpt_attention_is_causal_with_no_mask_tensor(recorded, mask_flag):
    """Upstream's default (the dataloader builds a [b, 1, s, s] causal mask) and the run without
    that mask both reach SDPA with is_causal=True, attn_mask None and enable_gqa: 2 layers x 2
    iterations x 4 micro-batches (global batch 8, micro-batch 2)."""
    record = recorded(*([mask_flag] if mask_flag else []))
    assert record["sdpa"] == [(FAST, 16)], record["sdpa"]


@pytest.mark.upstream
def test_pretrain_gpt_document_masks_stay_exact(recorded):
    """--reset-attention-mask cuts the causal mask at each document end: that mask is applied as
    given (key/value heads repeated for the memory-efficient kernel), never replaced by is_causal."""
    record = recorded("--reset-attention-mask", "--reset-position-ids", "--eod-mask-loss")
    masked = {"is_causal": False, "attn_mask": [2, 1, 64, 64], "enable_gqa": False, "q_heads": 4, "k_heads": 4}
    kinds = dict((json.dumps(k, sort_keys=True), n) for k, n in record["sdpa"])
    assert kinds.get(json.dumps(masked, sort_keys=True), 0) > 0, record["sdpa"]
    assert sum(kinds.values()) == 16


@pytest.mark.upstream
def test_unfused_backend_never_calls_sdpa(recorded):
    """--attention-backend unfused is the explicit path: the side-by-side baseline of the benchmark."""
    assert recorded("--attention-backend", "unfused")["sdpa"] == []
