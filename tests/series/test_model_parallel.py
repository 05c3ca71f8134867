"""model-parallel: tensor parallelism with sequence parallelism, and pipeline parallelism, off CUDA
(patch torch-norm-sp and the cpu-* patches).

CI: testkit/checks/compat.py on the patched wheel tree (the fixture compat_results), and two gloo ranks
for the tensor-parallel reduction of the torch norms' gradients. Full tree (ROCMPATCH_TEST_UPSTREAM):
`torchrun --nproc-per-node 2 pretrain_gpt.py` on the tiny Llama with one MoE layer.
"""

from __future__ import annotations

import pytest

from testkit import harness
from testkit.flags import MOE_LAYER

pytest.importorskip("torch")
pytestmark = harness.releases_with("model-parallel")


@pytest.mark.every_release
def test_tensor_and_pipeline_parallel_arguments_validate_off_cuda(compat_results):
    # The CUDA_DEVICE_MAX_CONNECTIONS=1 rule is for CUDA builds: not asked here (CPU build, unset).
    tp = compat_results["args"]["tp2_sp"]
    assert tp["error"] is None and tp["config_error"] is None, tp
    assert tp["sequence_parallel"] is True
    pp = compat_results["args"]["pp2_distopt"]
    assert pp["error"] is None and pp["config_error"] is None, pp


@pytest.mark.every_release
def test_torch_norm_parameters_carry_sequence_parallel(compat_results):
    attributes = compat_results["norm"]["attributes"]
    assert attributes == {"LayerNorm-sp1": [True, True], "LayerNorm-sp0": [False, False],
                          "RMSNorm-sp1": [True], "RMSNorm-sp0": [False]}


def test_torch_norm_gradients_are_reduced_across_tp_under_sp(patched_wheel, tmp_path_factory):
    """Two gloo ranks, TP=2 + SP: finalize_model_grads sums the norm's gradients over the TP group
    (rank gradients 1 and 2 -> 3 on both); without the attribute each rank kept its own."""
    workdirs = [tmp_path_factory.mktemp(f"sp-rank{rank}") for rank in range(2)]
    results = [r["sp_grads"] for r in harness.run_ranks("checks.compat", "sp_grads", patched_wheel, workdirs, timeout=300)]
    assert [r["grads"] for r in results] == [[3.0], [3.0]], results


@pytest.mark.every_release
def test_torch_norm_refusals_say_what_to_drop(compat_results):
    refusals = compat_results["norm"]["refusals"]
    assert refusals["layernorm_zero_centered_gamma"].startswith("ValueError: ") and "--apply-layernorm-1p" in refusals["layernorm_zero_centered_gamma"]
    assert "--no-persist-layer-norm" in refusals["persist_layer_norm"]
    assert refusals["memory_efficient_layer_norm"].startswith("ValueError: ")


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.mark.upstream
def test_tensor_parallel_sequence_parallel_with_moe(training_tree):
    run = harness.trains_on_cpu(training_tree, "--tensor-model-parallel-size", "2", "--sequence-parallel", *MOE_LAYER,
                                iters=6)
    harness.assert_learns(run.losses, 6)


@pytest.mark.upstream
def test_pipeline_parallel_with_moe_grouped_gemm(release, training_tree):
    """--moe-grouped-gemm without Transformer Engine runs torch's grouped GEMM, saying so once on the
    stage that holds the MoE layer (the second: rank 1), where the release declares grouped-gemm;
    elsewhere the sequential experts, saying so once."""
    run = harness.trains_on_cpu(training_tree, "--pipeline-model-parallel-size", "2", *MOE_LAYER, "--moe-grouped-gemm",
                                iters=6)
    harness.assert_learns(run.losses, 6)
    if "grouped-gemm" in release.features:
        assert run.output.count("one torch.nn.functional.grouped_mm per linear layer") == 1, run.tail()
    else:
        assert run.output.count("WARNING: --moe-grouped-gemm needs") == 1, run.tail()


def test_smoke_without_torch_norm_sp_fails_naming_file_and_patch(release, trees, patched_wheel):
    """smoke's ops stage on the series less torch-norm-sp: the torch norm check fails naming the file
    and the patch."""
    from rocmpatch.smoke.runner import Plan, run_stages
    from tests.fixtures import location_of

    tree = trees.without(release, "torch-norm-sp", patched_wheel)
    (ops,) = run_stages(Plan(tree, device="cpu", stages=("ops",), series=location_of(release.series_dir)))
    assert ops.status == "failed"
    assert "core torch LayerNorm" in ops.detail and "sequence_parallel attribute" in ops.detail
    assert "megatron/core/transformer/torch_norm.py is changed by patch" in ops.detail and "torch-norm-sp" in ops.detail
