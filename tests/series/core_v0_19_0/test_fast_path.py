"""core_v0.19.0: what upstream's own pretrain_gpt.py hands to the torch ops a GPU serves fast.

Full-tree tests (the mirror named by ROCMPATCH_TEST_UPSTREAM; skip without it): pretrain_gpt.py of the
patched tree runs on CPU, one process, two iterations of the tiny Llama (GQA: 4 query heads, 2
key/value groups), under tests/series/core_v0_19_0/record_calls.py, which records the arguments of
every torch.nn.functional.scaled_dot_product_attention call and of the optimizer. The same Python
code runs on a GPU, so these are the calls a GPU run makes (on a GPU the optimizer is fused too).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.series.core_v0_19_0.test_training import ITERATION, TINY_LLAMA, child_env, tree019  # noqa: F401 (a fixture)

pytestmark = pytest.mark.upstream

RECORDER = Path(__file__).resolve().parent / "record_calls.py"
# The tiny Llama's attention as the flash kernels take it: causal by flag, no mask tensor, the
# two key/value groups as they are.
FAST = {"is_causal": True, "attn_mask": None, "enable_gqa": True, "q_heads": 4, "k_heads": 2}


def recorded_run(tree: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "record.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(RECORDER),
               "pretrain_gpt.py", *TINY_LLAMA, "--train-iters", "2", "--lr-warmup-iters", "1", *extra]
    proc = subprocess.run(command, cwd=tree, env=child_env() | {"ROCMPATCH_RECORD": str(out)}, check=False,
                          capture_output=True, text=True, timeout=500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert len(ITERATION.findall(output)) == 2, output[-4000:]
    record = json.loads(Path(f"{out}.0").read_text())
    record["sdpa"] = [(json.loads(signature), count) for signature, count in record["sdpa"].items()]
    return record


@pytest.mark.parametrize("mask_flag", ["", "--no-create-attention-mask-in-dataloader"], ids=["dataloader-mask", "no-mask"])
def test_pretrain_gpt_attention_is_causal_with_no_mask_tensor(tree019, tmp_path, mask_flag):  # noqa: F811
    """Upstream's default (the dataloader builds a [b, 1, s, s] causal mask) and the run without
    that mask both reach SDPA with is_causal=True, attn_mask None and enable_gqa: 2 layers x 2
    iterations x 4 micro-batches (global batch 8, micro-batch 2)."""
    record = recorded_run(tree019, tmp_path, *([mask_flag] if mask_flag else []))
    assert record["sdpa"] == [(FAST, 16)], record["sdpa"]
    # and the optimizer is torch AdamW with its fused kernel (torch-adam-fused; the CPU's from torch 2.4)
    assert record["optimizers"] == [{"class": "AdamW", "fused": True, "foreach": None}], record["optimizers"]


def test_pretrain_gpt_document_masks_stay_exact(tree019, tmp_path):  # noqa: F811
    """--reset-attention-mask cuts the causal mask at each document end: that mask is applied as
    given (key/value heads repeated for the memory-efficient kernel), never replaced by is_causal."""
    record = recorded_run(tree019, tmp_path, "--reset-attention-mask", "--reset-position-ids", "--eod-mask-loss")
    masked = {"is_causal": False, "attn_mask": [2, 1, 64, 64], "enable_gqa": False, "q_heads": 4, "k_heads": 4}
    kinds = dict((json.dumps(k, sort_keys=True), n) for k, n in record["sdpa"])
    assert kinds.get(json.dumps(masked, sort_keys=True), 0) > 0, record["sdpa"]
    assert sum(kinds.values()) == 16


def test_unfused_backend_never_calls_sdpa(tree019, tmp_path):  # noqa: F811
    """--attention-backend unfused is the explicit path: the side-by-side baseline of the benchmark."""
    assert recorded_run(tree019, tmp_path, "--attention-backend", "unfused")["sdpa"] == []


def fp32_losses(tree: Path, *extra: str) -> dict[int, float]:
    """The tiny Llama in fp32 (TINY_LLAMA without --bf16), two processes, 4 iterations, distributed
    optimizer: {iteration: lm loss}."""
    flags = [f for f in TINY_LLAMA if f != "--bf16"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "pretrain_gpt.py",
               *flags, "--train-iters", "4", "--use-distributed-optimizer", "--overlap-grad-reduce", *extra]
    proc = subprocess.run(command, cwd=tree, env=child_env(), check=False, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    losses = {int(m[1]): float(m[2]) for m in ITERATION.finditer(output)}
    assert sorted(losses) == [1, 2, 3, 4], output[-4000:]
    return losses


def test_recipe_fusions_and_overlap_leave_the_loss_unchanged(tree019):  # noqa: F811
    """fp32: bias-SwiGLU and RoPE fused (torch.compile) against both unfused, four iterations within
    fp32 rounding; --overlap-param-gather changes nothing at all."""
    unfused = fp32_losses(tree019, "--no-bias-swiglu-fusion", "--no-rope-fusion")
    fused = fp32_losses(tree019)
    overlapped = fp32_losses(tree019, "--overlap-param-gather")
    assert all(abs(fused[i] - unfused[i]) <= 1e-5 * unfused[i] for i in unfused), (unfused, fused)
    assert overlapped == fused, (fused, overlapped)
