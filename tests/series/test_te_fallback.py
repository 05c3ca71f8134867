"""te-fallback: without Transformer Engine the local implementation is taken in one line, and
asking for TE fails naming the flag (patches te-optional, te-spec-clear-error).

CI: testkit/checks/compat.py on the patched wheel tree (the fixture compat_results). Full tree
(ROCMPATCH_TEST_UPSTREAM): upstream's own pretrain_gpt.py as __main__ (the fixture pretrain_validation).
"""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("te-fallback")

TE_LINE = "WARNING: Transformer Engine is not installed: using --transformer-impl local (pass --transformer-impl local to silence this)."
TE_ERROR = ("RuntimeError: --transformer-impl transformer_engine needs Transformer Engine, which cannot be imported: "
            "drop --transformer-impl transformer_engine (the local implementation is used without it) or install Transformer Engine.")


@pytest.mark.every_release
@pytest.mark.parametrize("spec, local", [
    ("te_spec", "get_gpt_layer_local_spec"),
    ("t5_encoder_te_spec", "get_t5_encoder_with_local_block_spec"),
    ("t5_decoder_te_spec", "get_t5_decoder_with_local_block_spec"),
    ("heterogeneous_te_spec", "use_te=False"),
])
def test_te_spec_without_te_says_what_to_use(release, compat_results, spec, local):
    if spec == "te_spec" and "te-spec-torch" in release.features:
        pytest.skip("te-spec-torch builds the GPT TE spec without TE (test_gpt_te_spec_without_te_builds_torch_modules_with_te_names)")
    assert compat_results["config"]["local_spec"] == "ModuleSpec"
    assert compat_results["config"]["t5_local_spec"] == "TransformerBlockSubmodules"
    error = compat_results["config"][spec]
    assert error.startswith("ImportError: The Transformer Engine spec needs Transformer Engine"), error
    assert "--transformer-impl local" in error and local in error
    assert "\n" not in error


def test_gpt_te_spec_without_te_builds_torch_modules_with_te_names(release, compat_results):
    """te-spec-torch replaces te-spec-clear-error's refusal for the GPT spec (tests/series/test_te_spec_torch.py
    checks the modules)."""
    harness.needs_features(release, "te-spec-torch")
    assert compat_results["config"]["te_spec"] is None
    assert compat_results["config"]["te_spec_linear_qkv"] == "TorchTELayerNormColumnParallelLinear"


@pytest.mark.every_release
def test_default_flags_fall_back_to_local_in_one_line(compat_results):
    case = compat_results["args"]["default"]
    assert case["error"] is None and case["config_error"] is None, case
    assert case["transformer_impl"] == "local"
    assert case["warnings"].count(TE_LINE) == 1


@pytest.mark.every_release
def test_explicit_transformer_engine_without_te_fails_naming_the_flag(release, compat_results):
    if "te-impl-torch" in release.features:
        pytest.skip("te-impl-torch builds TE's spec from torch modules instead (test_te_impl_torch.py)")
    for name in ("explicit_te", "explicit_te_equals"):
        assert compat_results["args"][name]["error"] == TE_ERROR


@pytest.mark.upstream
def test_upstream_pretrain_gpt_with_default_flags(release, pretrain_validation):
    """Upstream's own pretrain_gpt.py, default flags: validation passes with the one-line fallback;
    an explicit --transformer-impl transformer_engine stops in validate_args naming the flag (with
    te-impl-torch: validates, saying once that TE's spec is built from torch modules)."""
    explicit = pretrain_validation["explicit_te"]
    if "te-impl-torch" in release.features:
        from tests.series.test_te_impl_torch import TE_TORCH_LINE

        assert explicit["validated"] and explicit["warnings"].count(TE_TORCH_LINE) == 1, explicit
        assert TE_LINE not in explicit["warnings"]
    else:
        assert explicit["error"] == TE_ERROR
    default = pretrain_validation["default"]
    assert default["validated"], default
    assert default["warnings"].count(TE_LINE) == 1
