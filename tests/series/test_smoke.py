"""`rocmpatch smoke --device cpu` end to end on every release's real trees (CPU torch, gloo), as its
release.yaml's `smoke:` profile says: what it imports, the op checks it lists, the runs it trains.

CI: the patched wheel tree (a core-only tree: train is skipped); the ops stage seeds the
model-parallel RNG tracker as training does. Full tree (ROCMPATCH_TEST_UPSTREAM): every stage, the
profile's runs trained a few iterations on two CPU workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmpatch.smoke import op_checks
from rocmpatch.smoke.profile import load_profile
from testkit import harness

pytestmark = [harness.releases_with(), pytest.mark.wheel]
pytest.importorskip("torch")  # smoke on CPU needs PyTorch in this Python

TRAIN_ITERS = 6


def listed_checks(release, tree: Path) -> set[str]:
    """The op checks the profile lists whose code `tree` has."""
    return {c.name for c in op_checks.checks(load_profile(release.series_dir).ops) if (tree / c.module_path).is_file()}


def test_patched_wheel_tree_passes_on_cpu(release, patched_wheel, smoke_wheel_report):
    code, report = smoke_wheel_report
    stages = {s["name"]: s for s in report["stages"]}
    assert code == 0, json.dumps(report, indent=1)[:3000]
    assert list(stages) == ["environment", "import", "ops", "collectives", "train"]
    for name in ("environment", "import", "ops", "collectives"):
        assert stages[name]["status"] == "passed", stages[name]["detail"]
    assert stages["train"]["status"] == "skipped" and "core-only tree" in stages["train"]["detail"]
    cases = stages["ops"]["cases"]
    passed = {c["check"] for c in cases if c["status"] == "passed"}
    assert listed_checks(release, patched_wheel) <= passed, cases
    assert not [c for c in cases if c["status"] == "failed"], cases
    assert stages["import"]["tree"] == "core-only" and stages["import"]["nvidia_only_loaded"] == []
    assert stages["collectives"]["backend"] == "gloo" and stages["collectives"]["world_size"] == 2


def test_json_shape(release, smoke_wheel_report):
    _, report = smoke_wheel_report
    assert set(report) == {"target", "release", "device", "platform", "gpus", "ok", "stages"}
    assert report["device"] == "cpu" and report["platform"] == "cpu" and report["ok"] is True
    assert report["release"] == release.name
    for stage in report["stages"]:
        assert {"name", "status", "seconds", "detail"} <= set(stage)
        assert stage["status"] in ("passed", "failed", "skipped")
        assert isinstance(stage["seconds"], (int, float)) and isinstance(stage["detail"], str)


def test_ops_world_has_the_model_parallel_rng_seeded(patched_wheel):
    """A tensor-parallel layer built on a GPU forks the tracker's 'model-parallel-rng' state; the ops
    stage must seed it as training does (an H100 run of core_v0.5.0 failed 'is not added' without it).
    On CPU the patched tracker never asks for the state, so the seed itself is what is checked."""
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1])\n"
            "from rocmpatch.smoke.ops import single_process_model_parallel\n"
            "single_process_model_parallel(torch, 'cpu')\n"
            "from megatron.core.tensor_parallel.random import get_cuda_rng_tracker\n"
            "print(sorted(get_cuda_rng_tracker().get_states()))\n")
    result = subprocess.run([sys.executable, "-c", code, str(patched_wheel)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "model-parallel-rng" in result.stdout


# ---------------------------------------------------------------- full tree


@pytest.fixture(scope="session")
def full_run(release, training_tree) -> tuple[int, dict]:
    return harness.smoke_json(release, training_tree, "--train-iters", str(TRAIN_ITERS))


@pytest.mark.upstream
def test_full_patched_tree_on_cpu(release, training_tree, full_run):
    code, report = full_run
    stages = {s["name"]: s for s in report["stages"]}
    assert code == 0, json.dumps(report, indent=1)[:3000]
    profile = load_profile(release.series_dir)
    assert stages["import"]["tree"] == "full"
    assert set(profile.full_imports) <= set(stages["import"]["modules"])
    cases = stages["ops"]["cases"]
    assert listed_checks(release, training_tree) <= {c["check"] for c in cases if c["status"] == "passed"}, cases
    assert not [c for c in cases if c["status"] != "passed"], stages["ops"]["detail"]
    train = stages["train"]
    assert train["status"] == "passed", (train["detail"], train.get("last_output"))
    assert train["backend"] == "gloo" and train["tensor_parallel"] == 2 and train["precision"] == "bf16"
    runs = {r["path"]: r for r in train["runs"]}
    assert list(runs) == [run.name for run in profile.train.runs]
    for run in runs.values():
        assert run["iterations"] == TRAIN_ITERS and run["last_loss"] < run["first_loss"] and run["tokens_per_s"] > 0


@pytest.mark.upstream
def test_moe_runs_take_the_expert_parallel_workers(release, full_run):
    """A profile run with experts (core_v0.19.0's deepseek: MLA, MoE with MTP) trains over the two
    CPU workers as expert parallel 2 (smoke adds the expert parallel size)."""
    profile = load_profile(release.series_dir)
    moe = [run.name for run in profile.train.runs if "--num-experts" in run.args]
    if not moe:
        pytest.skip(f"{release.info.path}: no smoke run with experts")
    _, report = full_run
    train = {s["name"]: s for s in report["stages"]}["train"]
    runs = {r["path"]: r for r in train["runs"]}
    for name in moe:
        assert runs[name]["expert_parallel"] == 2, runs[name]
        assert f"{name} EP=2 loss" in train["detail"], train["detail"]
