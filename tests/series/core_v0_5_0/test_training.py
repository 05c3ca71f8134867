"""core_v0.5.0's own training runs (0109 cpu-training) on the whole patched tree
(ROCMPATCH_TEST_UPSTREAM; 1 process, gloo, mock data, the tiny GPT of testkit/flags.py):
megatron-core's GPT with the local spec (0.5.0 must be told --use-mcore-models) trains, and without
--distributed-backend gloo a run without a GPU stops with the diagnosis. The legacy model's runs are
tests/series/test_legacy_model.py; 0109's unit checks (DDP, timers, optimizers, clipping) are in
test_part2.py.
"""

from __future__ import annotations

import pytest

from testkit import harness
from testkit.flags import LEGACY_LLAMA, TINY_GPT, without
from tests.series.test_legacy_model import loss, pretrain_gpt

pytestmark = pytest.mark.upstream
pytest.importorskip("torch")


def test_pretrain_gpt_without_gpu_needs_gloo(training_tree):
    run = harness.pretrain(training_tree, without(TINY_GPT, "--distributed-backend"), processes=1, threads=2, timeout=400)
    assert run.returncode != 0, run.tail(3000)
    assert "Megatron sees no GPU" in run.output and "--distributed-backend gloo" in run.output, run.tail(3000)


def test_pretrain_gpt_mcore_local_trains(training_tree):
    steps, output = pretrain_gpt(training_tree, "--use-mcore-models", "--transformer-impl", "local",
                                 *LEGACY_LLAMA, "--train-iters", "8")
    assert "no GPU visible and --distributed-backend gloo: training on CPU" in output
    assert "Transformer Engine is not installed: the model uses the local layer spec (--spec local)" in output
    assert "is deprecated" not in output, output[-3000:]
    assert sorted(steps) == list(range(1, 9))
    assert loss(steps, 8) < loss(steps, 1) - 0.3, steps
