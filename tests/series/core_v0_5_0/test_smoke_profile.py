"""This release's smoke profile (release.yaml `smoke:`): what smoke checks, imports and trains on its
tree, and how its failures are blamed on its patches."""

from __future__ import annotations

from rocmpatch.smoke import blame, op_checks, train_args
from rocmpatch.smoke.profile import load_profile
from tests.fixtures import location_of
from testkit.harness import release_of

PATCHSETS = release_of(__file__).series_dir


def test_profile_is_what_smoke_did_before_profiles():
    profile = load_profile(PATCHSETS)
    assert profile.release == PATCHSETS.name
    assert profile.core_imports[0] == "megatron.core" and "megatron.core.datasets.gpt_dataset" in profile.core_imports
    assert {"megatron.arguments", "megatron.model.transformer", "pretrain_gpt", "pretrain_t5"} <= set(profile.full_imports)
    names = [check.name for check in op_checks.checks(profile.ops)]
    assert sorted(names) == sorted([  # the checks smoke ran before releases had profiles
        *(f"core softmax {v}" for v in ("causal", "causal-no-mask", "padding", "no-mask")),
        *(f"legacy softmax {v}" for v in ("causal", "padding", "no-mask")),
        "core LayerNorm", "core LayerNorm zero-centered", "legacy LayerNorm", "legacy LayerNorm zero-centered",
        "core RMSNorm", "RoPE apply", "RoPE frequencies", "optimizer Adam step", "optimizer SGD step",
        "grad-accum fusion ColumnParallelLinear", "grad-accum fusion linear_with_grad_accumulation",
        "grad-norm clipping"])
    assert [(run.name, run.args) for run in profile.train.runs] == [
        ("legacy", ()), ("mcore", ("--use-mcore-models", "--transformer-impl", "local"))]
    assert profile.train.script == "pretrain_gpt.py"


def test_blame_names_the_patch_that_changes_the_failing_file():
    index = blame.patch_index(location_of(PATCHSETS))
    assert "softmax" in index["megatron/core/fusions/fused_softmax.py"]
    text = blame.hint(["megatron/core/fusions/fused_softmax.py"], "scaled_masked_softmax_cuda", True, index)
    assert "changed by patch softmax" in text and "rocmpatch status" in text
    assert "pip install einops" in blame.hint([], "einops", False, index)
    assert "no patch of the series changes" in blame.hint(["megatron/nowhere.py"], None, False, index)


def test_blame_names_the_patch_whose_changes_are_missing_from_the_file(tmp_path):
    index = blame.patch_index(location_of(PATCHSETS))
    path = "megatron/initialize.py"
    *others, last = index[path]
    assert others and last == "cpu-training"
    file = tmp_path / path
    file.parent.mkdir(parents=True)
    file.write_text("\n".join(line for name in others for line in index.added[(path, name)]) + "\n")
    text = blame.hint([path], None, False, index, tmp_path)
    assert text == (f"{path} is changed by patch {', '.join(index[path])}; cpu-training is not applied there: "
                    "run rocmpatch status")
    with file.open("a") as handle:
        handle.write("\n".join(index.added[(path, last)]) + "\n")
    assert blame.hint([path], None, False, index, tmp_path).endswith("is it applied? run rocmpatch status")


def test_train_runs_the_tiny_gpt_over_gloo_on_cpu_and_nccl_on_gpus():
    runs = {run.name: run for run in load_profile(PATCHSETS).train.runs}
    mcore = load_profile(PATCHSETS).train.flags(runs["mcore"], "cpu")
    cpu = train_args.pretrain_args(train_args.profile_for("cpu"), 2, 10, "bf16", mcore)
    value = dict(zip(cpu, cpu[1:]))
    assert value["--distributed-backend"] == "gloo" and value["--tensor-model-parallel-size"] == "2"
    assert value["--hidden-size"] == "64" and value["--train-iters"] == "10"
    assert cpu[-4:] == ["--bf16", "--use-mcore-models", "--transformer-impl", "local"]
    gpu = train_args.pretrain_args(train_args.profile_for("rocm"), 4, 20, "bf16", list(runs["legacy"].args))
    value = dict(zip(gpu, gpu[1:]))
    assert value["--distributed-backend"] == "nccl" and value["--tensor-model-parallel-size"] == "4"
    assert value["--hidden-size"] == "256" and "--use-mcore-models" not in gpu
    assert train_args.profile_for("cpu").iterations == 10 and train_args.profile_for("cuda").iterations == 20
