"""core_v0.19.0: smoke's ops stage, as its release.yaml lists it, on the pin's megatron/ (the wheel's
bytes) with the series applied, on the CPU; and without patch torch-norm-sp, where the torch norm
check must fail naming the file and the patch."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmpatch.smoke.runner import Plan, run_stages
from tests.fixtures import location_of
from tests.smoke.trees import without_patch

pytest.importorskip("torch")

PATCHSETS = Path(__file__).resolve().parents[3] / "patchsets" / "core_v0.19.0"


def ops_stage(tree: Path):
    (ops,) = run_stages(Plan(tree, device="cpu", stages=("ops",), series=location_of(PATCHSETS)))
    return ops


def test_patched_tree_passes_every_listed_op_check(tree019):
    ops = ops_stage(tree019)
    assert ops.status == "passed", ops.detail
    passed = {c["check"] for c in ops.extra["cases"] if c["status"] == "passed"}
    assert {"core torch LayerNorm", "core torch RMSNorm", "core attention causal", "core attention padding",
            "core optimizer Adam step", "core grad-norm clipping"} <= passed
    # the recipes' attention shapes with only the flash and memory-efficient kernels allowed (on the
    # CPU: its flash kernel, sequence 256)
    kernels = {c["check"] for c in ops.extra["cases"] if c["check"].startswith("attention kernels ")}
    assert len(kernels) == 12 and kernels <= passed, ops.extra["cases"]
    assert "attention kernels deepseek-v2-lite causal" in passed  # 192/128 heads: values padded (mla-sdpa-value-pad)
    # --moe-grouped-gemm's expert GEMMs at the MoE recipes' shapes (scaled down on the CPU), each
    # naming the kernel that ran: torch's grouped GEMM has fp32 and bf16 kernels on the CPU
    grouped = [c for c in ops.extra["cases"] if c["check"].startswith("grouped GEMM ")]
    assert {c["check"] for c in grouped} == {f"grouped GEMM {r} experts" for r in
                                             ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite")}
    assert all(c["status"] == "passed" and "torch.nn.functional.grouped_mm" in c["detail"] for c in grouped), grouped
    # --fp8-format hybrid --fp8-recipe tensorwise's GEMMs on torch._scaled_mm, naming the formats
    (fp8,) = [c for c in ops.extra["cases"] if c["check"] == "FP8 GEMM (tensorwise, hybrid)"]
    assert fp8["status"] == "passed" and fp8["detail"].startswith("worst: OCP (cpu) [64 x 64 -> 32] "), fp8
    # te-spec-torch: the TE layer spec without TE, TE's names, the local spec's numbers (fp32, bf16, fp16)
    te_spec = [c for c in ops.extra["cases"] if c["check"] == "TE layer spec without TE"]
    assert len(te_spec) == 3 and all(c["status"] == "passed" for c in te_spec), te_spec


def test_tree_without_torch_norm_sp_fails_naming_file_and_patch(tree019, tmp_path):
    ops = ops_stage(without_patch(tree019, PATCHSETS, "torch-norm-sp", tmp_path / "tree"))
    assert ops.status == "failed"
    assert "core torch LayerNorm" in ops.detail and "sequence_parallel attribute" in ops.detail
    assert "megatron/core/transformer/torch_norm.py is changed by patch" in ops.detail and "torch-norm-sp" in ops.detail
