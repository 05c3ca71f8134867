"""The whole series against the whole pinned tree (needs ROCMPATCH_TEST_UPSTREAM, a git mirror
of NVIDIA/Megatron-LM): it applies exactly, the patch files are genuine format-patch output, and
the patched tree imports and validates its arguments with no NVIDIA-only package."""

from __future__ import annotations

import pytest

from rocmpatch.patching import apply_series
from tests.series.child import FULL_TREE_MODULES
from tests.series.conftest import PATCHSETS, PIN_COMMIT, git, read_tree, run_child, series_patches


def test_series_applies_exactly_to_the_pin(pin_tree):
    changes = apply_series(series_patches(), read_tree(pin_tree))
    assert "megatron/core/fusions/fused_softmax.py" in changes
    assert all(data is not None for data in changes.values()), "the series deletes no file"


def test_part1_patch_files_are_format_patch_output(upstream_mirror, tmp_path):
    """git am of patches 0001-0099 onto the pin, then format-patch, gives back the same bytes."""
    files = sorted(p for p in PATCHSETS.glob("00[0-9][0-9]-*.patch") if p.name[:4] != "0000")
    repo = tmp_path / "repo"
    git("init", "-q", str(repo))
    git("fetch", "-q", "--depth=1", f"file://{upstream_mirror}", PIN_COMMIT, cwd=repo)
    git("checkout", "-q", "FETCH_HEAD", cwd=repo)
    git("-c", "user.name=test", "-c", "user.email=test@invalid", "am", "-q", *map(str, files), cwd=repo)
    out = tmp_path / "out"
    git("format-patch", "-q", "--zero-commit", "--no-signature", "--full-index", "-o", str(out),
        f"{PIN_COMMIT}..HEAD", cwd=repo)
    produced = sorted(out.iterdir())
    assert len(produced) == len(files)
    for ours, theirs in zip(files, produced):
        assert ours.read_bytes() == theirs.read_bytes(), f"{ours.name} differs from format-patch output"


@pytest.fixture(scope="module")
def patched_results(patched_tree):
    return run_child("full", str(patched_tree))


@pytest.mark.parametrize("module", FULL_TREE_MODULES)
def test_patched_tree_imports_without_nvidia_packages(patched_results, module):
    assert patched_results["imports"][module] == "ok"


def test_pristine_tree_does_not_import(pin_tree):
    results = run_child("full", str(pin_tree))
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
