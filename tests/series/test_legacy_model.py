"""legacy-model: the legacy megatron/model GPT trains on the CPU with pretrain_gpt.py (its series'
cpu-training patch; legacy-gqa for query groups), on the whole patched tree (ROCMPATCH_TEST_UPSTREAM):
`torchrun --nproc-per-node 1`, gloo, mock data, a tiny model, dropout 0.1. It saves at iteration 5
and a second run resumes it to 10 with the losses of a straight run; a Llama-style configuration
(query groups, SwiGLU, RMSNorm, RoPE) trains.
"""

from __future__ import annotations

import math
import re

import pytest

from testkit import harness
from testkit.flags import LEGACY_LLAMA, TINY_GPT

# every_release: full tree only, so nothing in CI; a mirror run checks every release declaring legacy-model
pytestmark = [harness.releases_with("legacy-model"), pytest.mark.upstream, pytest.mark.every_release]
pytest.importorskip("torch")


def pretrain_gpt(tree, *extra: str) -> tuple[dict[int, tuple[int, float, float]], str]:
    """pretrain_gpt.py on one CPU process: {iteration: (consumed samples, learning rate, lm loss)}, output."""
    run = harness.trains(tree, [*TINY_GPT, *extra], processes=1, threads=2, timeout=400)
    steps = {i: (int(f["consumed samples"]), float(f["learning rate"]), float(f["lm loss"]))
             for i, f in run.logged.items() if "lm loss" in f}
    return steps, run.output


def loss(steps, iteration):
    return steps[iteration][2]


def test_pretrain_gpt_legacy_bf16_saves_and_resumes(training_tree, tmp_path):
    save = ["--bf16", "--save", str(tmp_path / "ckpt"), "--save-interval", "1000"]
    first, output = pretrain_gpt(training_tree, *save, "--exit-interval", "5")
    assert sorted(first) == [1, 2, 3, 4, 5]
    assert re.search(r"successfully saved checkpoint at iteration\s+5 ", output), output[-3000:]
    resumed, output = pretrain_gpt(training_tree, *save, "--load", str(tmp_path / "ckpt"))
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
    straight, _ = pretrain_gpt(training_tree, "--bf16")
    assert {i: straight[i] for i in range(6, 11)} == resumed, (straight, resumed)


def test_pretrain_gpt_legacy_llama_trains(training_tree):
    steps, output = pretrain_gpt(training_tree, *LEGACY_LLAMA, "--use-flash-attn", "--train-iters", "6")
    assert output.count("--use-flash-attn: the flash_attn package is not installed") == 1, output[-3000:]
    assert sorted(steps) == list(range(1, 7))
    assert loss(steps, 6) < loss(steps, 1) - 0.3, steps
