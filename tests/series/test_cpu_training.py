"""cpu-training: upstream's own pretrain_gpt.py, patched by the series, trains on CPU with gloo.

The CPU path is taken only when asked for (--distributed-backend gloo); with the default nccl
backend and no GPU, Megatron stops with one clear error (patch cpu-training).
CI: the device helper (cpu-device-utils) on the wheel's bytes; testkit/checks/compat.py's argument cases.
Full tree (ROCMPATCH_TEST_UPSTREAM): `torchrun --standalone --nproc-per-node 2 pretrain_gpt.py` on a
tiny Llama-style GPT (hidden 64, 2 layers, seq 64, --mock-data): default flags with torch_dist save
and exact resume (the distributed optimizer's is test_distopt_resume.py's).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import harness
from testkit.flags import TINY_LLAMA, without
from testkit.trees import write_files

pytest.importorskip("torch")
pytestmark = harness.releases_with("cpu-training")

DEVICE_HELPER = "megatron/core/_device_utils.py"


@pytest.mark.every_release
def test_device_helper(patched_wheel, tmp_path):
    """cpu-device-utils' helper, applied to the release's bytes: the CPU where no GPU is visible (this
    test runs on CPU PyTorch; on a GPU it would be the current GPU)."""
    assert b"from megatron.core._device_utils import" in (patched_wheel / "megatron/core/utils.py").read_bytes()
    source = (patched_wheel / DEVICE_HELPER).read_bytes()
    if source not in _HELPER_RUNS:
        _HELPER_RUNS[source] = run_device_helper(write_files(tmp_path, {DEVICE_HELPER: source}) / DEVICE_HELPER)
    proc = _HELPER_RUNS[source]
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


# megatron/core/_device_utils.py's bytes -> its run: the check runs that one file with torch and nothing
# else of the tree, so a release whose helper is byte-identical to one already run this session is
# judged on that run (the releases share cpu-device-utils' helper: one process instead of one each).
_HELPER_RUNS: dict[bytes, subprocess.CompletedProcess] = {}


def run_device_helper(helper: Path) -> subprocess.CompletedProcess:
    check = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('device_utils', {str(helper)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "want = torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() else torch.device('cpu')\n"
        "assert m.get_current_device() == want, m.get_current_device()\n"
        "assert m.is_on_current_device(torch.zeros(1, device=want))\n"
        "assert torch.cuda.is_available() or not m.is_on_current_device(torch.zeros(1, device='meta'))\n"
        "m.synchronize_current_device()\n"
        "print('ok', want)\n"
    )
    return subprocess.run([sys.executable, "-c", check], check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.every_release
def test_megatron_fsdp_on_the_cpu_path_is_refused_in_one_line(compat_results):
    """Megatron-FSDP's buffers and streams need a GPU; before cpu-training, validate_args failed in
    get_device_arch_version with "Torch not compiled with CUDA enabled"."""
    assert compat_results["args"]["megatron_fsdp_on_cpu"]["error"] == (
        "RuntimeError: --use-megatron-fsdp needs a GPU (its buffers and streams are CUDA/ROCm only): drop it to "
        "train on CPU with --distributed-backend gloo (--use-distributed-optimizer shards the optimizer state there too).")


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.mark.upstream
def test_requirements_declare_psutil_pybind11_and_python_3_10(patched_full):
    pyproject = (patched_full / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in pyproject
    requirements = (patched_full / "megatron/core/requirements.txt").read_text().split()
    for name in ("psutil", "pybind11"):
        assert f'"{name}"' in pyproject and name in requirements


@pytest.mark.upstream
def test_nccl_without_gpu_fails_naming_gloo(training_tree):
    """The default backend on a machine whose PyTorch sees no GPU: one clear error, no training."""
    run = harness.pretrain(training_tree, [*without(TINY_LLAMA, "--distributed-backend"), "--train-iters", "2"],
                           processes=1, timeout=300)
    assert run.returncode != 0, run.tail(3000)
    assert re.search(r"RuntimeError: Megatron sees no GPU: .* pass --distributed-backend gloo to train on CPU",
                     run.output), run.tail(3000)
    assert harness.CPU_LINE not in run.output and not run.logged  # no iteration logged at all


def saves_and_resumes_exactly(tree: Path, ckpt: Path, *extra: str) -> None:
    """Default flags (torch_dist checkpoints) save at 4 and 8; a run resumed from 4 logs the same
    losses as the straight run."""
    straight = harness.trains_on_cpu(tree, "--save", str(ckpt), "--save-interval", "4", *extra)
    harness.assert_learns(straight.losses, 8)
    assert "in torch_dist format" in straight.output and (ckpt / "iter_0000004" / "metadata.json").is_file()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    resumed = harness.trains_on_cpu(tree, "--load", str(ckpt), *extra)
    assert re.search(r"successfully loaded checkpoint from .* at iteration 4\b", resumed.output), resumed.tail(3000)
    # The logged values (7 significant digits) are equal, not just close (training-log-reset makes
    # the second logged iteration of a process its own loss, not a mean with the first).
    assert resumed.losses == {i: straight.losses[i] for i in (5, 6, 7, 8)}, (straight.losses, resumed.losses)


@pytest.mark.upstream
def test_llama_trains_saves_and_resumes_exactly(training_tree, tmp_path):
    saves_and_resumes_exactly(training_tree, tmp_path / "ckpt")
