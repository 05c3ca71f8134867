"""core_v0.19.0 on CPU: upstream's own pretrain_gpt.py, patched by the series, trains with gloo.

The CPU path is taken only when asked for (--distributed-backend gloo); with the default nccl
backend and no GPU, Megatron stops with one clear error (0062 cpu-training). Full-tree tests: the
pinned tree of the mirror named by ROCMPATCH_TEST_UPSTREAM (skip without it) with
patchsets/core_v0.19.0 applied in memory by rocmpatch, written once per session; every run is
`torchrun --standalone --nproc-per-node 2 pretrain_gpt.py` on a tiny Llama-style GPT (hidden 64,
2 layers, seq 64, --mock-data): default flags with torch_dist save and exact resume (with and
without the distributed optimizer), TP=2 with sequence parallelism, PP=2, each with one MoE layer
(with and without --moe-grouped-gemm). test_device_helper is the fast check CI runs without the
mirror.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmpatch import gitcmd
from tests.series.trees import apply_series, files_under, read_from_mapping
from rocmpatch.series import LoadedSeries, Location, load
from rocmpatch.trees import SeriesApplier
from tests.series.trees import write_files

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
SERIES_DIR = ROOT / "patchsets" / "core_v0.19.0"
PIN = "5be9626709af2722333bf54797c954c09edeada3"  # NVIDIA/Megatron-LM tag core_v0.19.0
DEVICE_HELPER = "megatron/core/_device_utils.py"

# Upstream's default flags plus a Llama-style block; the smoke train stage runs the same lines.
TINY_LLAMA = [
    "--distributed-backend", "gloo",
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--ffn-hidden-size", "128", "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "2", "--global-batch-size", "8",
    "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2",
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
    "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000", "--seed", "1234",
    "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
    "--group-query-attention", "--num-query-groups", "2",
    "--untie-embeddings-and-output-weights", "--bf16", "--disable-bias-linear",
]
ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+) \|")
CPU_LINE = "> no GPU visible and --distributed-backend gloo: training on CPU"
# What a parent torchrun, a CUDA setup or a developer's shell would otherwise pass down.
INHERITED = ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_")


def series() -> LoadedSeries:
    """patchsets/core_v0.19.0 (series.yaml and every patch, parsed); its lock is not needed here."""
    return load(Location(SERIES_DIR, SERIES_DIR / "upstream.lock"), require_lock=False)


# ---------------------------------------------------------------- CI: the device helper


def test_device_helper(wheel_core_files_019, tmp_path):
    """cpu-device-utils' helper (0050), applied to the release's bytes: the CPU where no GPU is visible (this test
    runs on CPU PyTorch; on a GPU it would be the current GPU)."""
    touched = ("megatron/core/utils.py", DEVICE_HELPER)
    patches = [files_under(loaded.patch, touched) for loaded in series().patches]
    changes = apply_series(patches, read_from_mapping(wheel_core_files_019))
    assert b"from megatron.core._device_utils import" in changes["megatron/core/utils.py"]
    helper = write_files(tmp_path, {DEVICE_HELPER: changes[DEVICE_HELPER]}) / DEVICE_HELPER
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
    proc = subprocess.run([sys.executable, "-c", check], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def wheel_core_files_019() -> dict[str, bytes]:
    from tests.megatron_wheel import megatron_core_files

    return megatron_core_files("core_v0.19.0")


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


@pytest.fixture(scope="session")
def tree019(upstream_mirror, tmp_path_factory) -> Path:
    """The pinned core_v0.19.0 tree of the mirror with the whole series applied, on disk."""
    if any(shutil.which(tool) is None for tool in ("make", "g++")):
        pytest.skip("pretrain_gpt.py builds the dataset helpers with make and g++")
    pytest.importorskip("pybind11")
    import torch

    if torch.cuda.is_available():
        pytest.skip("these runs check the CPU path; this machine has a GPU")
    repo = gitcmd.open_repo(upstream_mirror)
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, PIN))
    for loaded in series().patches:
        applier.apply(loaded)
    entries = applier.reader.entries
    files = {path: applier.read(path) for path in {**entries, **applier.changes}}
    modes = {path: entry.mode for path, entry in entries.items()} | applier.modes
    dest = tmp_path_factory.mktemp("core_v0.19.0-patched")
    return write_files(dest, files, frozenset(p for p, mode in modes.items() if mode == 0o100755))


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env


def pretrain_gpt(tree: Path, *extra: str, iters: int = 8, base: list[str] = TINY_LLAMA) -> tuple[dict[int, float], str]:
    """torchrun --nproc-per-node 2 pretrain_gpt.py on CPU: {iteration: lm loss}, output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "pretrain_gpt.py", *base, "--train-iters", str(iters), *extra]
    proc = subprocess.run(command, cwd=tree, env=child_env(), check=False, capture_output=True, text=True, timeout=500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"pretrain_gpt.py {' '.join(extra)} failed:\n{output[-6000:]}"
    losses = {int(m[1]): float(m[2]) for m in ITERATION.finditer(output)}
    assert losses and all(math.isfinite(v) for v in losses.values()), output[-4000:]
    assert output.count(CPU_LINE) == 1, output[-4000:]
    return losses, output


def assert_learns(losses: dict[int, float], iters: int) -> None:
    assert sorted(losses) == list(range(1, iters + 1)), losses
    assert losses[iters] < losses[1] - 0.1, losses


def test_nccl_without_gpu_fails_naming_gloo(tree019):
    """The default backend on a machine whose PyTorch sees no GPU: one clear error, no training."""
    flags = [f for f in TINY_LLAMA if f not in ("--distributed-backend", "gloo")]
    env = child_env() | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    proc = subprocess.run([sys.executable, "pretrain_gpt.py", *flags, "--train-iters", "2"],
                          cwd=tree019, env=env, check=False, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert re.search(r"RuntimeError: Megatron sees no GPU: .* pass --distributed-backend gloo to train on CPU",
                     output), output[-3000:]
    assert CPU_LINE not in output and not ITERATION.search(output)


@pytest.mark.parametrize("optimizer", ["", "--use-distributed-optimizer"], ids=["adam", "distopt"])
def test_llama_trains_saves_and_resumes_exactly(tree019, tmp_path, optimizer):
    """Default flags (torch_dist checkpoints) save at 4 and 8; a run resumed from 4 logs the same
    losses as the straight run."""
    ckpt = tmp_path / "ckpt"
    extra = [optimizer] if optimizer else []
    straight, output = pretrain_gpt(tree019, "--save", str(ckpt), "--save-interval", "4", *extra)
    assert_learns(straight, 8)
    assert "in torch_dist format" in output and (ckpt / "iter_0000004" / "metadata.json").is_file()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    resumed, output = pretrain_gpt(tree019, "--load", str(ckpt), *extra)
    assert re.search(r"successfully loaded checkpoint from .* at iteration 4\b", output), output[-3000:]
    # The logged values (7 significant digits) are equal, not just close (training-log-reset makes
    # the second logged iteration of a process its own loss, not a mean with the first).
    assert resumed == {i: straight[i] for i in (5, 6, 7, 8)}, (straight, resumed)


# Layer 1 dense, layer 2 MoE (4 experts, top 2): each parallel layout below runs both kinds of MLP.
MOE_LAYER = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-layer-freq", "[0,1]"]


def test_tensor_parallel_sequence_parallel_with_moe(tree019):
    losses, _ = pretrain_gpt(tree019, "--tensor-model-parallel-size", "2", "--sequence-parallel",
                             *MOE_LAYER, iters=6)
    assert_learns(losses, 6)


def test_pipeline_parallel_with_moe_grouped_gemm(tree019):
    """--moe-grouped-gemm without Transformer Engine runs torch's grouped GEMM, saying so once on the
    stage that holds the MoE layer (the second: rank 1)."""
    losses, output = pretrain_gpt(tree019, "--pipeline-model-parallel-size", "2", *MOE_LAYER,
                                  "--moe-grouped-gemm", iters=6)
    assert_learns(losses, 6)
    assert output.count("one torch.nn.functional.grouped_mm per linear layer") == 1, output[-4000:]
