"""`rocmpatch smoke --device cpu` on core_v0.5.0 trees with one patch left out: the stage that
depends on it fails naming the file and the patch. The patched tree is megatron/core of the pin
(the megatron-core 0.5.0 wheel's bytes) with one file put back as upstream has it; with
ROCMPATCH_TEST_UPSTREAM, the whole patched tree without patch cpu-training. (Every release's smoke
runs on its patched trees: tests/series/test_smoke.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmpatch.smoke.runner import Plan, run_stages
from tests.fixtures import location_of
from testkit import harness

pytestmark = pytest.mark.wheel
pytest.importorskip("torch")  # smoke on CPU needs PyTorch in this Python
TE_LAYERS = "megatron/core/transformer/custom_layers/transformer_engine.py"
SOFTMAX = "megatron/core/fusions/fused_softmax.py"


def tree_with_pristine(release, patched_wheel: Path, path: str, dest: Path) -> Path:
    """A copy of the patched tree with one file put back as upstream has it: the series half-applied."""
    tree = Path(shutil.copytree(patched_wheel, dest, ignore=shutil.ignore_patterns("__pycache__")))
    (tree / path).write_bytes(harness.wheel_files(release)[path])
    return tree


def test_tree_without_te_optional_fails_import_naming_file_and_patch(release, patched_wheel, tmp_path):
    tree = tree_with_pristine(release, patched_wheel, TE_LAYERS, tmp_path / "tree")
    (imported,) = run_stages(Plan(tree, device="cpu", stages=("import",), series=location_of(release.series_dir)))
    assert imported.status == "failed"
    assert "No module named 'transformer_engine'" in imported.detail
    assert f"imported by {TE_LAYERS}" in imported.detail
    assert f"{TE_LAYERS} is changed by patch " in imported.detail and "te-optional" in imported.detail
    assert imported.detail.endswith("is it applied? run rocmpatch status")


def test_tree_without_softmax_fails_ops_naming_file_and_patch(release, patched_wheel, tmp_path):
    tree = tree_with_pristine(release, patched_wheel, SOFTMAX, tmp_path / "tree")
    (ops,) = run_stages(Plan(tree, device="cpu", stages=("ops",), series=location_of(release.series_dir)))
    assert ops.status == "failed"
    assert "core softmax" in ops.detail and "_cuda'" in ops.detail
    assert f"{SOFTMAX} is changed by patch " in ops.detail and "softmax" in ops.detail.split(" is changed by patch ")[1]


@pytest.mark.upstream
def test_tree_without_cpu_training_fails_train_naming_the_patch(release, trees, training_tree):
    tree = trees.without(release, "cpu-training", training_tree)
    _, train = run_stages(Plan(tree, device="cpu", train_iters=2, stages=("environment", "train"),
                               series=location_of(release.series_dir)))
    assert train.status == "failed"
    assert "cannot train on CPU" in train.detail and "Megatron requires CUDA" in train.detail
    assert "megatron/initialize.py is changed by patch" in train.detail
    assert "; cpu-training is not applied there" in train.detail
