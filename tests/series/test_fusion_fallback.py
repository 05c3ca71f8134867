"""fusion-fallback: each fusion that needs apex, Transformer Engine or a CUDA kernel is turned off in
one line naming the flag that silences it (patches fusions-optional, moe-grouped-gemm-local).

CI: testkit/checks/compat.py on the patched wheel tree (the fixture compat_results). Full tree
(ROCMPATCH_TEST_UPSTREAM): upstream's own pretrain_gpt.py as __main__ (the fixture pretrain_validation).
"""

from __future__ import annotations

import pytest

from testkit import harness
from tests.series.test_te_fallback import TE_LINE

pytest.importorskip("torch")
pytestmark = harness.releases_with("fusion-fallback")

# flag that silences it -> what the line turns off (RoPE fusion stays on: rope-torch-fused gives it a torch form)
FUSION_FLAGS = {
    "--no-gradient-accumulation-fusion": "gradient_accumulation_fusion",
    "--no-masked-softmax-fusion": "masked_softmax_fusion",
    "--no-persist-layer-norm": "persist_layer_norm",
}


@pytest.mark.every_release
def test_default_flags_turn_each_fusion_off_in_one_line(compat_results):
    case = compat_results["args"]["default"]
    assert case["error"] is None and case["config_error"] is None, case
    fusion_lines = [line for line in case["warnings"] if line != TE_LINE]
    assert len(fusion_lines) == len(FUSION_FLAGS), fusion_lines
    for flag, dest in FUSION_FLAGS.items():
        [line] = [line for line in fusion_lines if f"(pass {flag} to silence this)." in line]
        assert f"turning {dest} off" in line
    assert case["apply_rope_fusion"] and not case["gradient_accumulation_fusion"]
    assert not case["masked_softmax_fusion"] and case["no_persist_layer_norm"]


@pytest.mark.every_release
def test_explicit_local_with_fusions_off_is_quiet(compat_results):
    case = compat_results["args"]["explicit_local_quiet"]
    assert case["error"] is None and case["config_error"] is None
    assert case["warnings"] == []


@pytest.mark.every_release
def test_layernorm_persist_line_names_the_norm(compat_results):
    case = compat_results["args"]["layernorm"]
    assert case["config_error"] is None
    assert any("uses the torch LayerNorm" in line for line in case["warnings"])


@pytest.mark.every_release
def test_moe_grouped_gemm_falls_back_in_one_line(release, compat_results):
    if "grouped-gemm" in release.features:
        pytest.skip(f"{release.info.path} declares grouped-gemm: the flag stays on (test_moe_grouped_gemm_stays_on_without_te)")
    case = compat_results["args"]["moe_grouped_gemm"]
    assert case["error"] is None and case["config_error"] is None
    assert case["moe_grouped_gemm"] is False
    lines = [line for line in case["warnings"] if "--moe-grouped-gemm" in line]
    assert len(lines) == 1 and "SequentialMLP" in lines[0] and "drop --moe-grouped-gemm" in lines[0]
    assert not any("--moe-grouped-gemm" in line for line in compat_results["args"]["moe"]["warnings"])


@pytest.mark.every_release
def test_moe_grouped_gemm_stays_on_without_te(release, compat_results):
    """Without TE the local spec runs torch's grouped GEMM (tests/series/test_grouped_gemm.py), so
    validate_args keeps the flag and skips TE's compute-capability check, which fails off CUDA."""
    harness.needs_features(release, "grouped-gemm")
    case = compat_results["args"]["moe_grouped_gemm"]
    assert case["error"] is None and case["config_error"] is None
    assert case["moe_grouped_gemm"] is True
    assert not any("--moe-grouped-gemm" in line for line in case["warnings"])
    assert not any("--moe-grouped-gemm" in line for line in compat_results["args"]["moe"]["warnings"])


@pytest.mark.upstream
def test_upstream_pretrain_gpt_with_default_flags(pretrain_validation):
    """Upstream's own pretrain_gpt.py, default flags: each fusion line once, RoPE fusion kept."""
    default = pretrain_validation["default"]
    assert default["validated"], default
    for flag in FUSION_FLAGS:
        assert sum(f"(pass {flag} to silence this)." in line for line in default["warnings"]) == 1
    assert not any("--no-rope-fusion" in line for line in default["warnings"])
