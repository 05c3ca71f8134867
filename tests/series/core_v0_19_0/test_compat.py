"""core_v0.19.0 COMPAT patches (0001-0029): what ROCm GPUs need as much as CPU CI.

The trees: megatron/core + megatron/training of the pin from the megatron-core 0.19.1 wheel, with
the whole series applied in memory by rocmpatch (conftest.py), or pristine; the whole pinned tree
from a mirror for pretrain_gpt.py (skipped without ROCMPATCH_TEST_UPSTREAM). Megatron code runs
only in child processes (harness.run_child, compat_checks.py) with every NVIDIA-only package,
triton included, refused as absent; the patched tree's checks share one child.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.series.core_v0_19_0 import harness

pytest.importorskip("torch")

PATCHED_GROUPS = "imports,args,norm,config,distopt,help"
TE_LINE = "WARNING: Transformer Engine is not installed: using --transformer-impl local (pass --transformer-impl local to silence this)."
TE_ERROR = ("RuntimeError: --transformer-impl transformer_engine needs Transformer Engine, which cannot be imported: "
            "drop --transformer-impl transformer_engine (the local implementation is used without it) or install Transformer Engine.")
# flag that silences it -> what the line turns off (RoPE fusion stays on: 0031 gives it a torch form)
FUSION_FLAGS = {
    "--no-gradient-accumulation-fusion": "gradient_accumulation_fusion",
    "--no-masked-softmax-fusion": "masked_softmax_fusion",
    "--no-persist-layer-norm": "persist_layer_norm",
}


@pytest.fixture(scope="session")
def patched(tree019, child_dir) -> dict:
    return harness.run_child("compat_checks", PATCHED_GROUPS, tree019, child_dir)


@pytest.fixture(scope="session")
def pristine_imports(pristine019, child_dir) -> dict:
    return harness.run_child("compat_checks", "imports", pristine019, child_dir)["imports"]


def test_pristine_pin_does_not_import_without_triton_or_on_python_3_11(pristine_imports):
    assert "No module named 'triton'" in pristine_imports["megatron.core"]
    if tuple(pristine_imports["python"]) < (3, 12):
        assert "cannot import name 'override' from 'typing'" in pristine_imports["megatron.training"]


def test_patched_tree_imports(patched):
    imports = patched["imports"]
    assert not imports["stubbed_paged_stash"]
    for name in ("megatron.core", "megatron.training", "megatron.training.models.gpt", "megatron.training.arguments",
                 "megatron.core.models.gpt.gpt_layer_specs"):
        assert imports[name] is None, (name, imports[name])


def test_paged_stash_without_triton_is_refused_naming_the_flag(patched):
    assert patched["config"]["paged_stash"].startswith("ValueError: moe_paged_stash needs triton")
    assert "--moe-paged-stash" in patched["config"]["paged_stash"]


@pytest.mark.parametrize("spec, local", [
    ("t5_encoder_te_spec", "get_t5_encoder_with_local_block_spec"),
    ("t5_decoder_te_spec", "get_t5_decoder_with_local_block_spec"),
    ("heterogeneous_te_spec", "use_te=False"),
])
def test_t5_and_heterogeneous_te_specs_without_te_say_what_to_use(patched, spec, local):
    assert patched["config"]["local_spec"] == "ModuleSpec"
    assert patched["config"]["t5_local_spec"] == "TransformerBlockSubmodules"
    error = patched["config"][spec]
    assert error.startswith("ImportError: The Transformer Engine spec needs Transformer Engine"), error
    assert "--transformer-impl local" in error and local in error
    assert "\n" not in error


def test_gpt_te_spec_without_te_builds_torch_modules_with_te_names(patched):
    """te-spec-torch (0071) replaces te-spec-clear-error's refusal for the GPT spec
    (tests/series/test_te_spec_torch.py checks the modules)."""
    assert patched["config"]["te_spec"] is None
    assert patched["config"]["te_spec_linear_qkv"] == "TorchTELayerNormColumnParallelLinear"


@pytest.fixture(scope="session")
def vision(tree019, child_dir) -> dict:
    return harness.run_child("compat_checks", "vision", tree019, child_dir)["vision"]


@pytest.mark.parametrize("model, shape", [("clip", [2, 17, 64]), ("llava", [2, 48, 128])])
def test_clip_and_llava_build_and_train_on_cpu_without_te(vision, model, shape):
    """CLIP: 16 patches + the class token; LLaVA: 31 text tokens + 17 image embeddings, vocab 128."""
    result = vision[model]
    assert isinstance(result, dict), result  # an error text otherwise (TypeError: ... 'config' without 0012)
    assert result["shape"] == shape and result["device"] == "cpu"
    assert result["norm"] in ("LayerNorm", "RMSNorm")  # WrappedTorchNorm builds torch's own norm
    assert result["with_grad"] == result["params"], result


def test_default_flags_fall_back_to_local_in_one_line_each(patched):
    case = patched["args"]["default"]
    assert case["error"] is None and case["config_error"] is None, case
    assert case["transformer_impl"] == "local"
    assert case["warnings"].count(TE_LINE) == 1
    fusion_lines = [line for line in case["warnings"] if line != TE_LINE]
    assert len(fusion_lines) == len(FUSION_FLAGS), fusion_lines
    for flag, dest in FUSION_FLAGS.items():
        [line] = [line for line in fusion_lines if f"(pass {flag} to silence this)." in line]
        assert f"turning {dest} off" in line
    assert case["apply_rope_fusion"] and not case["gradient_accumulation_fusion"]
    assert not case["masked_softmax_fusion"] and case["no_persist_layer_norm"]


def test_explicit_transformer_engine_without_te_fails_naming_the_flag(patched):
    for name in ("explicit_te", "explicit_te_equals"):
        assert patched["args"][name]["error"] == TE_ERROR


def test_megatron_fsdp_on_the_cpu_path_is_refused_in_one_line(patched):
    """cpu-training (0062): Megatron-FSDP's buffers and streams need a GPU; before, validate_args
    failed in get_device_arch_version with "Torch not compiled with CUDA enabled"."""
    assert patched["args"]["megatron_fsdp_on_cpu"]["error"] == (
        "RuntimeError: --use-megatron-fsdp needs a GPU (its buffers and streams are CUDA/ROCm only): drop it to "
        "train on CPU with --distributed-backend gloo (--use-distributed-optimizer shards the optimizer state there too).")


def test_explicit_local_with_fusions_off_is_quiet(patched):
    case = patched["args"]["explicit_local_quiet"]
    assert case["error"] is None and case["config_error"] is None
    assert case["warnings"] == []


def test_layernorm_persist_line_names_the_norm(patched):
    case = patched["args"]["layernorm"]
    assert case["config_error"] is None
    assert any("uses the torch LayerNorm" in line for line in case["warnings"])


def test_moe_grouped_gemm_stays_on_without_te(patched):
    """Without TE the local spec runs torch's grouped GEMM (tests/series/test_grouped_gemm.py), so
    validate_args keeps the flag and skips TE's compute-capability check, which fails off CUDA."""
    case = patched["args"]["moe_grouped_gemm"]
    assert case["error"] is None and case["config_error"] is None
    assert case["moe_grouped_gemm"] is True
    assert not any("--moe-grouped-gemm" in line for line in case["warnings"])
    assert not any("--moe-grouped-gemm" in line for line in patched["args"]["moe"]["warnings"])


def test_tensor_and_pipeline_parallel_arguments_validate_off_cuda(patched):
    # The CUDA_DEVICE_MAX_CONNECTIONS=1 rule is for CUDA builds: not asked here (CPU build, unset).
    tp = patched["args"]["tp2_sp"]
    assert tp["error"] is None and tp["config_error"] is None, tp
    assert tp["sequence_parallel"] is True
    pp = patched["args"]["pp2_distopt"]
    assert pp["error"] is None and pp["config_error"] is None, pp


def test_torch_norm_parameters_carry_sequence_parallel(patched):
    attributes = patched["norm"]["attributes"]
    assert attributes == {"LayerNorm-sp1": [True, True], "LayerNorm-sp0": [False, False],
                          "RMSNorm-sp1": [True], "RMSNorm-sp0": [False]}


def test_torch_norm_gradients_are_reduced_across_tp_under_sp(tree019, tmp_path_factory):
    """Two gloo ranks, TP=2 + SP: finalize_model_grads sums the norm's gradients over the TP group
    (rank gradients 1 and 2 -> 3 on both); without the attribute each rank kept its own."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    workdirs = [tmp_path_factory.mktemp(f"sp-rank{rank}") for rank in range(2)]
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(harness.run_child, "compat_checks", "sp_grads", tree019, workdirs[rank], timeout=300,
                            env={"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
                for rank in range(2)]
        results = [run.result()["sp_grads"] for run in runs]
    assert [r["grads"] for r in results] == [[3.0], [3.0]], results


def test_torch_norm_refusals_say_what_to_drop(patched):
    refusals = patched["norm"]["refusals"]
    assert refusals["layernorm_zero_centered_gamma"].startswith("ValueError: ") and "--apply-layernorm-1p" in refusals["layernorm_zero_centered_gamma"]
    assert "--no-persist-layer-norm" in refusals["persist_layer_norm"]
    assert refusals["memory_efficient_layer_norm"].startswith("ValueError: ")


def test_distributed_optimizer_torch_adam_step_save_and_resume(patched):
    result = patched["distopt"]
    assert result["have_apex_or_te"] is False  # the torch Adam paths are the ones exercised
    assert result["step_saved_before_any_step"] is None  # saved, not an AssertionError
    assert result["step_saved"] == 3.0
    assert result["steps_after_resume"] == [3.0, 3.0] and not result["step_tensor_shared"]
    assert result["steps_after_two_more"] == [5.0, 5.0]
    assert result["max_param_diff"] == 0.0  # resumed == straight run, bit for bit
    assert result["steps_loaded_from_before_any_step"] == [0.0, 0.0]


def test_distributed_optimizer_check_fails_without_the_patch(series019, tmp_path_factory, child_dir):
    """The same check on the compat patches minus distopt-torch-adam-step shows upstream's behaviour
    (the CPU patches after them build on its lines, so they are left out too)."""
    loaded = [p for p in harness.series_through("te-spec-clear-error") if p.name != "distopt-torch-adam-step"]
    tree = harness.wheel_tree(tmp_path_factory.mktemp("tree019-no-distopt"), loaded)
    result = harness.run_child("compat_checks", "distopt", tree, child_dir)["distopt"]
    assert result["step_saved_before_any_step"].startswith("AssertionError")
    assert result["step_tensor_shared"] and result["steps_after_resume"] == [0.0, 0.0]
    assert result["max_param_diff"] > 1e-5  # and the resumed run drifts from the straight one


def test_help_formats_where_upstream_crashed(patched, tmp_path_factory, child_dir):
    """argparse-help-percent (0013): `pretrain_gpt.py --help` formats every argument's help, the
    paged-stash docstring's "10%" included; the series without it fails as upstream's --help does."""
    assert patched["help"]["error"] is None
    assert "Magnitude is headroom (e.g. 1.10 = 10%)." in patched["help"]["paged_stash_help"]
    loaded = [p for p in harness.series_through() if p.name != "argparse-help-percent"]
    tree = harness.wheel_tree(tmp_path_factory.mktemp("tree019-no-help-fix"), loaded)
    result = harness.run_child("compat_checks", "help", tree, child_dir)["help"]
    assert result["error"].startswith("ValueError"), result  # as upstream's --help


def test_upstream_pretrain_gpt_with_default_flags(full019, child_dir):
    """Upstream's own pretrain_gpt.py, default flags: validation passes with the one-line fallbacks;
    an explicit --transformer-impl transformer_engine stops in validate_args naming the flag."""
    result = harness.run_child("compat_checks", "pretrain", full019, child_dir)["pretrain"]
    assert result["explicit_te"]["error"] == TE_ERROR
    default = result["default"]
    assert default["validated"], default
    assert default["warnings"].count(TE_LINE) == 1
    for flag in FUSION_FLAGS:
        assert sum(f"(pass {flag} to silence this)." in line for line in default["warnings"]) == 1
    assert not any("--no-rope-fusion" in line for line in default["warnings"])


def test_requirements_declare_psutil_pybind11_and_python_3_10(full019):
    pyproject = (full019 / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in pyproject
    requirements = (full019 / "megatron/core/requirements.txt").read_text().split()
    for name in ("psutil", "pybind11"):
        assert f'"{name}"' in pyproject and name in requirements
