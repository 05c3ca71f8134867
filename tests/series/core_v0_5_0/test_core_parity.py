"""The series' megatron/core/ hunks, applied to the real upstream bytes from the megatron-core
0.5.0 wheel (the fixture patched_wheel), exercised on CPU with the NVIDIA-only packages refused."""

from __future__ import annotations

import pytest

from testkit.harness import run_checks

pytest.importorskip("torch")  # the checks run PyTorch in a child: without it they cannot say anything

# Max abs error of the probabilities, and max error of the input gradient relative to its
# largest value, against an fp32 reference: the output rounding of each dtype.
TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
FUNCTIONS = ["ScaledUpperTriangMaskedSoftmax", "ScaledMaskedSoftmax", "ScaledSoftmax"]
DTYPES = list(TOLERANCE)


@pytest.fixture(scope="module")
def core_results(patched_wheel, tmp_path_factory):
    return run_checks("checks.core_v0_5_0.part1_checks", "core", patched_wheel, tmp_path_factory.mktemp("core"))


def check_case(case: dict, dtype: str) -> None:
    assert case["out_dtype_ok"], "output and input gradient keep the input dtype"
    assert case["shape_ok"]
    assert case["forward_err"] <= TOLERANCE[dtype]
    assert case["backward_err"] <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_softmax_function_matches_fp32_reference(core_results, function, dtype):
    check_case(core_results["softmax"][f"{function}-{dtype}"], dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mask_type", ["causal", "padding"])
def test_fused_scale_mask_softmax_takes_fused_path_and_matches(core_results, mask_type, dtype):
    case = core_results["softmax"][f"FusedScaleMaskSoftmax-{mask_type}-{dtype}"]
    assert case["fused_path"], "sizes chosen so that the kernel path is taken, as on CUDA"
    check_case(case, dtype)


def test_batch_per_block_follows_the_kernel_formula(core_results):
    # 128 threads per block, warps of min(next_pow2(sk), 32), 2 rows per warp up to 128 elements.
    assert core_results["softmax"]["get_batch_per_block"] == [16, 8, 8, 8, 4, 4]


def test_compiled_extensions_are_used_when_present(patched_wheel, tmp_path):
    results = run_checks("checks.core_v0_5_0.part1_checks", "core-kernels", patched_wheel, tmp_path)
    for name in ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda", "scaled_softmax_cuda"):
        assert results[name] == {"calls": ["forward", "backward"], "forward_from_kernel": True, "backward_from_kernel": True}
    assert results["get_batch_per_block"] == 7


def test_get_nccl_options_survives_builds_without_config(core_results):
    nccl = core_results["nccl"]
    assert "error" not in nccl, nccl.get("error")
    assert nccl["no_process_group_nccl"] == "None"
    assert nccl["no_config"] == "None"
    assert nccl["not_configured"] == "None"
    assert nccl["partial_config"] == {"max_ctas": 8, "min_ctas": 1}
    assert any("cga_cluster_size" in w for w in nccl["partial_config_warnings"])
