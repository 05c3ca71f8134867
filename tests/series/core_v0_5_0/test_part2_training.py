"""Patch 0109 (cpu-training) on CPU: pretrain_gpt.py itself under torchrun on the whole patched
tree (ROCMPATCH_TEST_UPSTREAM; 1 process, gloo, mock data, a tiny model, dropout 0.1): the legacy
model saves at iteration 5 and a second run resumes it to 10 with the losses of a straight run;
Llama-style configurations (query groups, SwiGLU, RMSNorm, RoPE) train on the megatron-core model
(local spec) and on the legacy model (0110); without --distributed-backend gloo a run without a
GPU stops with the diagnosis. 0109's unit checks (DDP, timers, optimizers, clipping) are in
test_part2.py.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

# A tiny GPT on --mock-data: NullTokenizer needs no vocabulary file. On a machine without a GPU,
# --distributed-backend gloo asks for the CPU run (0109: without it the run stops); docs/patches.md
# shows these lines as a command. Dropout is Megatron's default 0.1.
TINY_GPT = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
    "--seq-length", "64", "--max-position-embeddings", "64",
    "--micro-batch-size", "4", "--global-batch-size", "4",
    "--train-iters", "10", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine",
    "--lr-warmup-iters", "2", "--weight-decay", "0.01", "--clip-grad", "1.0",
    "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128",
    "--distributed-backend", "gloo", "--no-gradient-accumulation-fusion",
    "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "1", "--split", "949,50,1",
]
ITERATION = re.compile(
    r"iteration\s+(\d+)/\s*\d+ \| consumed samples:\s+(\d+) .*?learning rate: ([0-9.E+-]+) .*?lm loss: ([0-9.E+-]+)"
)


# ---------------------------------------------------------------- pretrain_gpt.py under torchrun


def needs_dataset_helpers():
    """Rank 0 builds megatron/core/datasets/helpers.cpp with make, a C++ compiler and pybind11."""
    missing = [tool for tool in ("make", "g++", "python3-config") if shutil.which(tool) is None]
    if importlib.util.find_spec("pybind11") is None:
        missing.append("pybind11")
    if missing:
        pytest.skip(f"pretrain_gpt.py builds the dataset helpers: missing {', '.join(missing)}")


LLAMA = ["--group-query-attention", "--num-query-groups", "2", "--swiglu", "--normalization", "RMSNorm",
         "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear"]


def run_pretrain_gpt(tree: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_"))}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2", PYTHONPATH=str(tree))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               "pretrain_gpt.py", *args]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=400)


def pretrain_gpt(tree: Path, *extra: str) -> tuple[dict[int, tuple[int, float, float]], str]:
    """Run pretrain_gpt.py on CPU: {iteration: (consumed samples, learning rate, lm loss)}, output."""
    needs_dataset_helpers()
    proc = run_pretrain_gpt(tree, [*TINY_GPT, *extra])
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"pretrain_gpt.py {' '.join(extra)} failed:\n{output[-6000:]}"
    steps = {int(m[1]): (int(m[2]), float(m[3]), float(m[4])) for m in ITERATION.finditer(output)}
    assert steps and all(math.isfinite(loss) for _, _, loss in steps.values()), output[-4000:]
    return steps, output


def loss(steps, iteration):
    return steps[iteration][2]


def test_pretrain_gpt_legacy_bf16_saves_and_resumes(patched_full, tmp_path):
    save = ["--bf16", "--save", str(tmp_path / "ckpt"), "--save-interval", "1000"]
    first, output = pretrain_gpt(patched_full, *save, "--exit-interval", "5")
    assert sorted(first) == [1, 2, 3, 4, 5]
    assert re.search(r"successfully saved checkpoint at iteration\s+5 ", output), output[-3000:]
    resumed, output = pretrain_gpt(patched_full, *save, "--load", str(tmp_path / "ckpt"))
    assert re.search(r"successfully loaded checkpoint from .* at iteration 5\b", output), output[-3000:]
    assert sorted(resumed) == [6, 7, 8, 9, 10]
    # The scheduler and the sample count continue: cosine from 1e-3 to 1e-4 over iterations 2..10.
    consumed, lr, _ = resumed[6]
    assert consumed == 24 and math.isclose(lr, 5.5e-4, rel_tol=1e-3), resumed[6]
    # The weights continue too: a fresh model starts near ln(128) ~ 4.9.
    assert loss(resumed, 6) < loss(first, 1) - 0.3, (first, resumed)
    assert loss(resumed, 10) < loss(first, 5) and loss(first, 5) < loss(first, 1), (first, resumed)
    # With dropout on, the resumed run is the straight run: the dropout stream (the CPU generator,
    # which the data loaders no longer draw from) continues where the saved run stopped.
    straight, _ = pretrain_gpt(patched_full, "--bf16")
    assert {i: straight[i] for i in range(6, 11)} == resumed, (straight, resumed)


def test_pretrain_gpt_without_gpu_needs_gloo(patched_full):
    args = [a for a in TINY_GPT if a not in ("--distributed-backend", "gloo")]
    proc = run_pretrain_gpt(patched_full, args)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "Megatron sees no GPU" in output and "--distributed-backend gloo" in output, output[-3000:]


def test_pretrain_gpt_legacy_llama_trains(patched_full):
    steps, output = pretrain_gpt(patched_full, *LLAMA, "--use-flash-attn", "--train-iters", "6")
    assert output.count("--use-flash-attn: the flash_attn package is not installed") == 1, output[-3000:]
    assert sorted(steps) == list(range(1, 7))
    assert loss(steps, 6) < loss(steps, 1) - 0.3, steps


def test_pretrain_gpt_mcore_local_trains(patched_full):
    steps, output = pretrain_gpt(patched_full, "--use-mcore-models", "--transformer-impl", "local",
                                 *LLAMA, "--train-iters", "8")
    assert "no GPU visible and --distributed-backend gloo: training on CPU" in output
    assert "Transformer Engine is not installed: the model uses the local layer spec (--spec local)" in output
    assert "is deprecated" not in output, output[-3000:]
    assert sorted(steps) == list(range(1, 9))
    assert loss(steps, 8) < loss(steps, 1) - 0.3, steps
