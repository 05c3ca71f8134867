"""`rocmpatch smoke --device cpu` end to end on real trees (CPU torch, gloo).

The patched tree is megatron/core of the pin (the megatron-core 0.5.0 wheel's bytes) with the
series' megatron/core hunks; a broken tree leaves one patch out, and the stage that depends on it
must fail naming the file and the patch. With ROCMPATCH_TEST_UPSTREAM, the whole patched tree
too: it trains on CPU (pretrain_gpt.py over gloo), and without patch cpu-training train fails naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from tests.fixtures import location_of
from rocmpatch.smoke.runner import Plan, run_stages
from tests.series.core_v0_5_0.trees import PATCHSETS, RELEASE, patched_core_tree, patched_upstream_tree
from tests.smoke.trees import without_patch

pytestmark = pytest.mark.wheel
pytest.importorskip("torch")  # smoke on CPU needs PyTorch in this Python
TE_LAYERS = "megatron/core/transformer/custom_layers/transformer_engine.py"
SOFTMAX = "megatron/core/fusions/fused_softmax.py"


def core_tree_with_pristine(wheel_core_files: dict[str, bytes], path: str, dest: Path) -> Path:
    """The patched core tree with one file put back as upstream has it: the series half-applied."""
    tree = patched_core_tree(wheel_core_files, dest)
    (tree / path).write_bytes(wheel_core_files[path])
    return tree


def smoke_json(target: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["smoke", "--target", str(target), "--device", "cpu", "--json",
                                      "--release", RELEASE, *extra])
    start = result.stdout.index("{")  # progress lines go to stderr; stdout is the JSON document
    return result.exit_code, json.loads(result.stdout[start:])


@pytest.fixture(scope="module")
def patched_core(wheel_core_files, tmp_path_factory) -> Path:
    return patched_core_tree(wheel_core_files, tmp_path_factory.mktemp("patched-core"))


@pytest.fixture(scope="module")
def core_run(patched_core) -> tuple[int, dict]:
    return smoke_json(patched_core)


def test_patched_core_tree_passes_on_cpu(core_run):
    code, report = core_run
    stages = {s["name"]: s for s in report["stages"]}
    assert code == 0, json.dumps(report, indent=1)[:3000]
    assert list(stages) == ["environment", "import", "ops", "collectives", "train"]
    for name in ("environment", "import", "ops", "collectives"):
        assert stages[name]["status"] == "passed", stages[name]["detail"]
    assert stages["train"]["status"] == "skipped" and "core-only tree" in stages["train"]["detail"]
    checks = {c["check"] for c in stages["ops"]["cases"] if c["status"] == "passed"}
    assert {"core softmax causal", "core softmax padding", "core LayerNorm", "core RMSNorm", "RoPE apply"} <= checks
    assert stages["import"]["tree"] == "core-only" and stages["import"]["nvidia_only_loaded"] == []
    assert stages["collectives"]["backend"] == "gloo" and stages["collectives"]["world_size"] == 2


def test_json_shape(core_run):
    _, report = core_run
    assert set(report) == {"target", "release", "device", "platform", "gpus", "ok", "stages"}
    assert report["device"] == "cpu" and report["platform"] == "cpu" and report["ok"] is True
    assert report["release"] == "core_v0.5.0"
    for stage in report["stages"]:
        assert {"name", "status", "seconds", "detail"} <= set(stage)
        assert stage["status"] in ("passed", "failed", "skipped")
        assert isinstance(stage["seconds"], (int, float)) and isinstance(stage["detail"], str)


def test_tree_without_te_optional_fails_import_naming_file_and_patch(wheel_core_files, tmp_path):
    tree = core_tree_with_pristine(wheel_core_files, TE_LAYERS, tmp_path / "tree")
    (imported,) = run_stages(Plan(tree, device="cpu", stages=("import",), series=location_of(PATCHSETS)))
    assert imported.status == "failed"
    assert "No module named 'transformer_engine'" in imported.detail
    assert f"imported by {TE_LAYERS}" in imported.detail
    assert f"{TE_LAYERS} is changed by patch " in imported.detail and "te-optional" in imported.detail
    assert imported.detail.endswith("is it applied? run rocmpatch status")


def test_tree_without_softmax_fails_ops_naming_file_and_patch(wheel_core_files, tmp_path):
    tree = core_tree_with_pristine(wheel_core_files, SOFTMAX, tmp_path / "tree")
    (ops,) = run_stages(Plan(tree, device="cpu", stages=("ops",), series=location_of(PATCHSETS)))
    assert ops.status == "failed"
    assert "core softmax" in ops.detail and "_cuda'" in ops.detail
    assert f"{SOFTMAX} is changed by patch " in ops.detail and "softmax" in ops.detail.split(" is changed by patch ")[1]


def test_not_a_megatron_tree_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["smoke", "--target", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 5 and "no megatron/core/__init__.py" in result.output


@pytest.fixture(scope="module")
def full_tree(upstream_mirror, tmp_path_factory) -> Path:
    return patched_upstream_tree(upstream_mirror, tmp_path_factory.mktemp("full") / "tree")


@pytest.mark.upstream
def test_full_patched_tree_on_cpu(full_tree):
    code, report = smoke_json(full_tree, "--train-iters", "6")
    stages = {s["name"]: s for s in report["stages"]}
    assert code == 0, json.dumps(report, indent=1)[:3000]
    assert stages["import"]["tree"] == "full"
    assert {"megatron.training", "megatron.optimizer", "pretrain_gpt"} <= set(stages["import"]["modules"])
    checks = {c["check"] for c in stages["ops"]["cases"] if c["status"] == "passed"}
    assert {"legacy softmax causal", "legacy LayerNorm", "optimizer Adam step", "optimizer SGD step",
            "grad-norm clipping", "grad-accum fusion ColumnParallelLinear"} <= checks
    assert not [c for c in stages["ops"]["cases"] if c["status"] != "passed"], stages["ops"]["detail"]
    train = stages["train"]
    assert train["status"] == "passed", train["detail"]
    assert train["backend"] == "gloo" and train["tensor_parallel"] == 2 and train["precision"] == "bf16"
    runs = {r["path"]: r for r in train["runs"]}
    assert set(runs) == {"legacy", "mcore"}
    for run in runs.values():
        assert run["iterations"] == 6 and run["last_loss"] < run["first_loss"] and run["tokens_per_s"] > 0


@pytest.mark.upstream
def test_tree_without_cpu_training_fails_train_naming_the_patch(full_tree, tmp_path):
    tree = without_patch(full_tree, PATCHSETS, "cpu-training", tmp_path / "tree")
    _, train = run_stages(Plan(tree, device="cpu", train_iters=2, stages=("environment", "train"),
                               series=location_of(PATCHSETS)))
    assert train.status == "failed"
    assert "cannot train on CPU" in train.detail and "Megatron requires CUDA" in train.detail
    assert "megatron/initialize.py is changed by patch" in train.detail
    assert "; cpu-training is not applied there" in train.detail


def test_ops_world_has_the_model_parallel_rng_seeded(patched_core):
    """A tensor-parallel layer built on a GPU forks the tracker's 'model-parallel-rng' state; the ops
    stage must seed it as training does (an H100 run of core_v0.5.0 failed 'is not added' without it).
    On CPU the patched tracker never asks for the state, so the seed itself is what is checked."""
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1])\n"
            "from rocmpatch.smoke.ops import single_process_model_parallel\n"
            "single_process_model_parallel(torch, 'cpu')\n"
            "from megatron.core.tensor_parallel.random import get_cuda_rng_tracker\n"
            "print(sorted(get_cuda_rng_tracker().get_states()))\n")
    result = subprocess.run([sys.executable, "-c", code, str(patched_core)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "model-parallel-rng" in result.stdout
