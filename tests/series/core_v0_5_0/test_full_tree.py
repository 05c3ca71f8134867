"""The whole series against the whole pinned tree (needs ROCMPATCH_TEST_UPSTREAM, a git mirror
of NVIDIA/Megatron-LM): it applies exactly, the patch files are genuine format-patch output, and
the patched tree imports and validates its arguments with no NVIDIA-only package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rocmpatch import gitcmd
from testkit.checks.core_v0_5_0.part1_checks import FULL_TREE_MODULES
from testkit.harness import release_of, run_checks, series_applier

RELEASE = release_of(__file__)
PATCHSETS = RELEASE.series_dir


def test_series_applies_exactly_to_the_pin(upstream_mirror):
    changes = series_applier(RELEASE, upstream_mirror, RELEASE.series).changes
    assert "megatron/core/fusions/fused_softmax.py" in changes
    assert all(data is not None for data in changes.values()), "the series deletes no file"


def test_rocmpatch_check_passes(upstream_mirror):
    """`rocmpatch check` (the engine's command; skipped until it is merged) applies the series
    exactly to the pin and finds upstream.lock up to date."""
    pytest.importorskip("rocmpatch.commands.check")
    proc = subprocess.run(
        [sys.executable, "-m", "rocmpatch", "check", "--series-dir", str(PATCHSETS), "--upstream-url", str(upstream_mirror)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_part1_patch_files_are_format_patch_output(upstream_mirror, tmp_path, monkeypatch):
    """git am of patches 0001-0099 onto the pin, then format-patch, gives back the same bytes (the
    headers `rocmpatch lock` writes from series.yaml are format-patch's, "[PATCH]" without a count)."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no user or system git config changes the output
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    files = sorted(p for p in PATCHSETS.glob("00[0-9][0-9]-*.patch") if p.name[:4] != "0000")
    pin = RELEASE.pin
    repo = gitcmd.init_repo(tmp_path / "repo")
    gitcmd.fetch_commit(repo, f"file://{upstream_mirror}", pin)
    gitcmd.run(repo, "checkout", "-q", pin)
    gitcmd.run(repo, "-c", "user.name=test", "-c", "user.email=test@invalid", "am", "-q", *map(str, files))
    out = tmp_path / "out"
    gitcmd.run(repo, "format-patch", "-q", "--no-numbered", "--zero-commit", "--no-signature", "--full-index", "-o", str(out), f"{pin}..HEAD")
    produced = sorted(out.iterdir())
    assert len(produced) == len(files)
    for ours, theirs in zip(files, produced):
        assert ours.read_bytes() == theirs.read_bytes(), f"{ours.name} differs from format-patch output"


@pytest.fixture(scope="module")
def patched_results(patched_full, tmp_path_factory):
    return run_checks("checks.core_v0_5_0.part1_checks", "full", patched_full, tmp_path_factory.mktemp("full"))


@pytest.mark.parametrize("module", FULL_TREE_MODULES)
def test_patched_tree_imports_without_nvidia_packages(patched_results, module):
    assert patched_results["imports"][module] == "ok"


def test_pristine_tree_does_not_import(pristine_full, tmp_path):
    results = run_checks("checks.core_v0_5_0.part1_checks", "full", pristine_full, tmp_path)
    assert "transformer_engine" in results["imports"]["megatron"]
    assert [name for name, value in results["imports"].items() if value == "ok"] == []
    assert "error" in results["args"]


def test_gpt_arguments_validate_at_world_size_one(patched_results):
    assert patched_results["args"] == {
        "distributed_backend": "nccl",  # --distributed-backend rccl is an alias
        "tokenizer_type": "GPT2BPETokenizer",
        "world_size": 1,
        "data_parallel_size": 1,
        "params_dtype": "torch.bfloat16",
    }


def test_legacy_default_bf16_softmax_runs_without_extension(patched_results):
    result = patched_results["legacy_softmax"]
    assert result.get("fused_path") is True, result
    assert result["dtype"] == "torch.bfloat16"
    assert result["forward_err"] <= 1.6e-2


def test_initialize_steps_run_on_cpu(patched_results):
    assert patched_results["initialize"] == {
        "fused_kernels_load": "ok",  # no nvcc probe without CUDA_HOME
        "texpr_fuser_enabled": True,  # torch >= 2.2: TorchScript's default fuser kept
        "nvfuser_warnings": [],
    }
