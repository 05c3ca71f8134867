"""core_v0.19.0, patch sdpa-attention: DotProductAttention's SDPA path against its explicit path.

The tree is megatron/core + megatron/training of the pin (the megatron-core 0.19.1 wheel's bytes)
with the series applied in memory by rocmpatch's own loader and patching, up to and including
sdpa-attention, written once per session. Megatron code runs only in one child process
(tests/series/child.py), which runs every group of attention_checks.py on the CPU and returns
plain numbers; the assertions live here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmpatch.patching import Patch
from tests.series.trees import apply_series, read_from_mapping
from rocmpatch.schema import load_series
from rocmpatch.series import loaded_patch
from tests.megatron_wheel import megatron_core_files
from tests.series.child import run_checks
from tests.series.trees import write_files

pytest.importorskip("torch")

RELEASE = "core_v0.19.0"
SERIES_DIR = Path(__file__).resolve().parents[3] / "patchsets" / RELEASE
PATCH = "sdpa-attention"
GROUPS = "compare,calls,scale_reference,dropout,selection"

FP32_ABS = 1e-5  # max |SDPA - explicit|, output and every input gradient
BF16_REL = 2e-2  # the same relative to the largest value, bf16


def series_through(name: str) -> list[Patch]:
    """The release's patches in series order, up to and including `name`."""
    series = load_series(SERIES_DIR)
    patches = []
    for entry in series.entries:
        path = series.patch_path(entry)
        patches.append(loaded_patch(entry, path.read_bytes(), path).patch)
        if entry.name == name:
            return patches
    raise AssertionError(f"{SERIES_DIR / 'series.yaml'} lists no patch {name!r}")


def wheel_part(patch: Patch, files: dict[str, bytes]) -> Patch:
    """The file changes of `patch` the wheel's partial tree can take (no setup.py, pretrain_*.py...)."""
    kept = tuple(f for f in patch.files if (f.old_path or f.new_path) in files or f.old_path is None)
    return Patch(patch.name, patch.source, kept)


@pytest.fixture(scope="session")
def attention_results(tmp_path_factory) -> dict:
    files = megatron_core_files(RELEASE)
    changes = apply_series([wheel_part(p, files) for p in series_through(PATCH)], read_from_mapping(files))
    assert "megatron/core/transformer/dot_product_attention.py" in changes
    tree = write_files(tmp_path_factory.mktemp("core019-attention"), {**files, **changes})
    return run_checks("core_v0_19_0.attention_checks", GROUPS, tree, tmp_path_factory.mktemp("attention-run"), timeout=300)


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
