"""fused-adamw: without TE/apex the optimizer is torch AdamW with fused=True (patch torch-adam-fused;
the CPU's fused kernel exists from torch 2.4), foreach unset.

CI: testkit/checks/fusions.py's optimizer group on the patched wheel tree (the fixture fusion_results).
Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's pretrain_gpt.py under record_calls.py (the run
test_sdpa_causal.py records), the optimizer it builds.
"""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = [harness.releases_with("fused-adamw"), pytest.mark.every_release]  # one child per release: cheap


@pytest.mark.upstream
@pytest.mark.parametrize("mask_flag", ["", "--no-create-attention-mask-in-dataloader"], ids=["dataloader-mask", "no-mask"])
def test_pretrain_gpt_optimizer_is_fused_torch_adamw(recorded, mask_flag):
    record = recorded(*([mask_flag] if mask_flag else []))
    assert record["optimizers"] == [{"class": "AdamW", "fused": True, "foreach": None}], record["optimizers"]


@pytest.mark.parametrize("kind", ["local", "distributed"])
def test_torch_adamw_is_fused(fusion_results, kind):
    """Without TE/apex: torch AdamW with fused=True (CPU kernel from torch 2.4), foreach unset; two
    steps train and leave one step count."""
    result = fusion_results["optimizer"][kind]
    assert result["class"] == "AdamW" and result["fused"] is True and result["foreach"] is None, result
    assert result["losses"][1] < result["losses"][0] and result["steps"] == [2.0], result
