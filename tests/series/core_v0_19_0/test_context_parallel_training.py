"""core_v0.19.0 on CPU: upstream's own pretrain_gpt.py with --context-parallel-size 2 and no
Transformer Engine (cp-attention, cp-rope-cpu).

Full-tree tests (the mirror named by ROCMPATCH_TEST_UPSTREAM; skip without it): the tiny Llama of
test_training.py (GQA, RoPE, RMSNorm, SwiGLU, seq 64, global batch 8 of micro-batches of 2, the
dataloader's causal mask) without dropout, 4 iterations over gloo. In fp32 a run with context
parallel 2 logs the losses of the same run with context parallel 1 (one process, the same global
batch) to 1e-4 relative at every iteration, for both --cp-comm-type; bf16 with context parallel 2
trains; tensor parallel 2 with sequence parallelism and context parallel 2 (4 ranks) logs the losses
of tensor parallel 2 alone; an unsupported --cp-comm-type stops with one line.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.series.core_v0_19_0.test_training import ITERATION, TINY_LLAMA, child_env, tree019  # noqa: F401 (a fixture)

pytestmark = pytest.mark.upstream

ITERS = 4
RELATIVE = 1e-4
# The tiny Llama in fp32 without dropout: a run's losses depend only on the data and the weights.
FP32_LLAMA = [flag for flag in TINY_LLAMA if flag != "--bf16"] + ["--attention-dropout", "0", "--hidden-dropout", "0"]


def run(tree: Path, ranks: int, *extra: str, flags: list[str] = FP32_LLAMA) -> tuple[int, dict[int, float], str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
               "pretrain_gpt.py", *flags, "--train-iters", str(ITERS), *extra]
    proc = subprocess.run(command, cwd=tree, env=child_env(), check=False, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    return proc.returncode, {int(m[1]): float(m[2]) for m in ITERATION.finditer(output)}, output


def losses(tree: Path, ranks: int, *extra: str, flags: list[str] = FP32_LLAMA) -> dict[int, float]:
    code, logged, output = run(tree, ranks, *extra, flags=flags)
    assert code == 0, f"pretrain_gpt.py {' '.join(extra)} failed:\n{output[-6000:]}"
    assert sorted(logged) == list(range(1, ITERS + 1)), output[-4000:]
    assert all(math.isfinite(v) for v in logged.values()), logged
    return logged


def assert_same(got: dict[int, float], want: dict[int, float], relative: float = RELATIVE) -> None:
    for iteration, loss in want.items():
        assert abs(got[iteration] - loss) <= relative * abs(loss), (iteration, got, want)


@pytest.fixture(scope="module")
def cp1(tree019) -> dict[int, float]:  # noqa: F811
    return losses(tree019, 1)


@pytest.mark.parametrize("extra", [["--cp-comm-type", "p2p"], ["--cp-comm-type", "all_gather"], ["--no-rope-fusion"]],
                         ids=["p2p", "all_gather", "unfused-rope"])
def test_cp2_fp32_losses_equal_cp1(tree019, cp1, extra):  # noqa: F811
    """The RoPE fusion is on by default (rope-torch-fused): each rank rotates its half of the
    positions with the torch form, or with --no-rope-fusion with the unfused one; both give the
    losses of context parallel 1 (fused)."""
    code, logged, output = run(tree019, 2, "--context-parallel-size", "2", *extra)
    assert code == 0, output[-6000:]
    assert "turning apply_rope_fusion off" not in output, output[-3000:]  # fusion on unless asked
    assert_same(logged, cp1)


def test_cp2_bf16_trains(tree019, cp1):  # noqa: F811
    """bf16 weights and activations (fp32 gradients and Adam), the ring: the fp32 run's losses
    to the precision of bf16."""
    bf16 = losses(tree019, 2, "--context-parallel-size", "2", flags=[*FP32_LLAMA, "--bf16"])
    assert_same(bf16, cp1, relative=1e-2)


def test_tp2_sequence_parallel_with_cp2(tree019):  # noqa: F811
    tp2 = losses(tree019, 2, "--tensor-model-parallel-size", "2", "--sequence-parallel")
    tp2_cp2 = losses(tree019, 4, "--tensor-model-parallel-size", "2", "--sequence-parallel",
                     "--context-parallel-size", "2")
    assert_same(tp2_cp2, tp2)


def test_unsupported_cp_comm_type_is_one_line(tree019):  # noqa: F811
    code, logged, output = run(tree019, 2, "--context-parallel-size", "2", "--cp-comm-type", "a2a")
    assert code != 0 and not logged
    assert ("ValueError: --cp-comm-type a2a: context parallelism without Transformer Engine runs p2p or "
            "all_gather; pass --cp-comm-type p2p or all_gather.") in output, output[-3000:]
