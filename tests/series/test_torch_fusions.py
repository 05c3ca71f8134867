"""torch-fusions: the torch-native fusions the recipes turn on leave the loss unchanged.

CI: the patched wheel tree; one child process (testkit/checks/fusions.py, the fixture fusion_results)
builds a tiny Llama-shaped GPTModel (local spec: RMSNorm, SwiGLU, RoPE, GQA) twice from one seed,
with and without each fusion, and compares one forward and backward in fp32. The fused functions
run eagerly there (TORCHDYNAMO_DISABLE=1); the full-tree run with torch.compile is below.
Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's pretrain_gpt.py in fp32, two processes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from testkit import harness
from testkit.flags import FP32_LLAMA

pytest.importorskip("torch")
pytestmark = [harness.releases_with("torch-fusions"), pytest.mark.every_release]  # one child per release: cheap

FP32_ABS = 1e-5


@pytest.mark.parametrize("name", ["bias-swiglu", "rope", "all"])
def test_fusion_leaves_loss_and_gradients_unchanged(fusion_results, name):
    case = fusion_results["fusions"][name]
    assert all(case["flags"].values()), case  # the fusion was really on
    assert case["loss_diff"] <= FP32_ABS, case
    if name == "all":  # includes the native cross entropy: see below
        assert case["grad_diff"] <= 2 ** -8 * case["grad_scale"], case
    else:
        assert case["grad_diff"] <= FP32_ABS, case


def test_native_cross_entropy_fusion(fusion_results):
    """Same loss in fp32; the logits gradient upstream's native kernel returns is bf16 (the recipes'
    dtype), so fp32 gradients agree to bf16 rounding, and a bf16 model's agree exactly."""
    fp32, bf16 = (fusion_results["fusions"][n] for n in ("cross-entropy native", "cross-entropy native bf16"))
    assert fp32["flags"]["cross_entropy_loss_fusion"] and fp32["loss_diff"] <= FP32_ABS, fp32
    assert fp32["grad_diff"] <= 2 ** -8 * fp32["grad_scale"], fp32
    assert bf16["loss_diff"] == 0.0 and bf16["grad_diff"] == 0.0, bf16


def test_rope_fusion_is_the_torch_form_with_cos_sin_cached(fusion_results):
    """Without TE, --rope-fusion is rope-torch-fused's form; cos/sin are computed once for all
    layers (q and k) of the first forward and never again (the rotary embedding caches freqs)."""
    fusions = fusion_results["fusions"]
    assert fusions["rope_is_torch_form"]
    assert fusions["rope_cos_calls"] == [1, 0]


def test_rmsnorm_goes_through_torch_functional_rms_norm(fusion_results):
    fusions = fusion_results["fusions"]
    assert fusions["norm_class"] == "RMSNorm" and fusions["rms_norm_calls"] == 5  # 2 layers x 2 + final


# megatron/core/jit.py's bytes -> the release whose tree checked them: the jit_fuser checks exercise
# that one module (jit-fuser-fallback), so a release whose patched jit.py is byte-identical to one
# already checked in this session is not checked again (two child processes per release saved in CI).
_JIT_CHECKED: dict[tuple[str, bytes], str] = {}


def _jit_checked_elsewhere(release, patched_wheel: Path, case: str) -> None:
    key = (case, (patched_wheel / "megatron" / "core" / "jit.py").read_bytes())
    first = _JIT_CHECKED.setdefault(key, release.name)
    if first != release.name:
        pytest.skip(f"megatron/core/jit.py is byte-identical to {first}'s, checked there")


def test_jit_fuser_is_torch_compile_where_a_compiler_is(release, patched_wheel, child_dir):
    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine")
    _jit_checked_elsewhere(release, patched_wheel, "compile")
    result = harness.run_checks("checks.fusions", "jit_fuser", patched_wheel, child_dir)["jit_fuser"]
    assert result == {"fuser": "compile", "warnings": []}


def test_jit_fuser_without_a_compiler_runs_eagerly_saying_so(release, patched_wheel, tmp_path):
    """PATH without g++ (CPU): torch.compile would stop the first step with InvalidCxxCompiler."""
    _jit_checked_elsewhere(release, patched_wheel, "eager")
    result = harness.run_checks("checks.fusions", "jit_fuser", patched_wheel, tmp_path,
                                env={"PATH": str(Path(sys.executable).parent), "CXX": ""})["jit_fuser"]
    assert result["fuser"] == "noop_decorator"
    assert result["warnings"] == ["torch.compile cannot build kernels here: no C++ compiler for the CPU (g++ not on "
                                  "PATH); Megatron's jit_fuser functions (bias-SwiGLU/GeLU, RoPE, cross-entropy fusions) "
                                  "run eagerly."]


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


def fp32_losses(tree: Path, *extra: str) -> dict[int, float]:
    """The tiny Llama in fp32, two processes, 4 iterations, distributed optimizer: {iteration: lm loss}."""
    run = harness.trains(tree, [*FP32_LLAMA, "--train-iters", "4", "--use-distributed-optimizer", "--overlap-grad-reduce",
                                *extra], timeout=900)
    assert sorted(run.losses) == [1, 2, 3, 4], run.tail()
    return run.losses


@pytest.mark.upstream
def test_recipe_fusions_and_overlap_leave_the_loss_unchanged(training_tree):
    """fp32: bias-SwiGLU and RoPE fused (torch.compile) against both unfused, four iterations within
    fp32 rounding; --overlap-param-gather changes nothing at all."""
    unfused = fp32_losses(training_tree, "--no-bias-swiglu-fusion", "--no-rope-fusion")
    fused = fp32_losses(training_tree)
    overlapped = fp32_losses(training_tree, "--overlap-param-gather")
    assert all(abs(fused[i] - unfused[i]) <= 1e-5 * unfused[i] for i in unfused), (unfused, fused)
    assert overlapped == fused, (fused, overlapped)
