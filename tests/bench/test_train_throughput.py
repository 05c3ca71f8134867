"""bench/train_throughput.py, the one training benchmark: its flags are the recipe's, and on the CPU (the
tiny shape) it trains both paths, runs the context-parallel exactness check (CP 2 against CP 1) and
writes its JSON. The CPU run needs upstream's pretrain_gpt.py (the full tree of the mirror,
ROCMPATCH_TEST_UPSTREAM), the default release's patched tree; the GPU run is documented in docs/validation.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmpatch.recipes.catalog import find
from tests.recipes.test_recipe_trains import SCALED_AWAY

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from train_throughput import compare_losses, paths_to_train  # noqa: E402
from training_runs import DEEPSEEK_V2_LITE, FAST_FLAGS, LLAMA3_8B, Shape, moe_flags  # noqa: E402


# Set by Shape.args() (--group-query-attention) or by run_schedule() (the rest).
SCHEDULE = ("--group-query-attention", "--lr-decay-style", "--weight-decay", "--adam-beta2", "--clip-grad", "--recompute-granularity",
            "--recompute-method", "--recompute-num-layers")


def as_dict(argv: list[str]) -> dict[str, str | None]:
    out, i = {}, 0
    while i < len(argv):
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
        out[argv[i]] = value
        i += 2 if value is not None else 1
    return out


def test_fast_flags_are_the_llama3_8b_recipes():
    """The benchmark trains what `rocmpatch recipe launch llama3-8b` runs (its schedule, layout and
    data aside); train_throughput.py --help and the JSON name these flags."""
    recipe = find("llama3-8b")
    wanted = {flag: value for flag, value in recipe.merged_args(recipe.layouts[1]).items()
              if flag not in SCALED_AWAY and flag not in SCHEDULE}
    fast = as_dict(FAST_FLAGS)
    assert {k: (None if v is None else float(v) if v.replace(".", "").replace("e-", "").isdigit() else v) for k, v in fast.items()} == {
        k: (None if v is True else float(v) if isinstance(v, (int, float)) else v) for k, v in wanted.items()}


def test_the_gpu_shape_is_the_recipes_with_fewer_layers():
    args = find("llama3-8b").args
    assert (LLAMA3_8B.hidden, LLAMA3_8B.ffn, LLAMA3_8B.heads, LLAMA3_8B.groups, LLAMA3_8B.seq) == (
        args["--hidden-size"], args["--ffn-hidden-size"], args["--num-attention-heads"], args["--num-query-groups"],
        args["--seq-length"])
    assert LLAMA3_8B.vocab == find("llama3-8b").vocab_size and LLAMA3_8B.layers < args["--num-layers"]


def test_the_moe_gpu_block_is_deepseek_v2_lites_with_fewer_layers():
    recipe = find("deepseek-v2-lite")
    args, flags = recipe.args, as_dict(moe_flags(DEEPSEEK_V2_LITE))
    assert (DEEPSEEK_V2_LITE.hidden, DEEPSEEK_V2_LITE.ffn, DEEPSEEK_V2_LITE.heads, DEEPSEEK_V2_LITE.seq) == (
        args["--hidden-size"], args["--ffn-hidden-size"], args["--num-attention-heads"], args["--seq-length"])
    assert DEEPSEEK_V2_LITE.vocab == recipe.vocab_size and DEEPSEEK_V2_LITE.layers < args["--num-layers"]
    for flag in ("--num-experts", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-router-topk",
                 "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--rotary-scaling-factor"):
        assert float(flags[flag]) == float(args[flag]), flag
    assert flags["--moe-layer-freq"] == "([0]*1+[1]*3)"


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_moe_paths_differ_only_by_the_grouped_gemm_flag(tmp_path, device):
    paths = paths_to_train(tmp_path, device, {"count": 1}, None, skip_cp=True, moe=True)
    (_, sequential, gpus_s, shape_s), (_, grouped, gpus_g, shape_g) = paths["moe-sequential"], paths["moe-grouped"]
    assert grouped == [*sequential, "--moe-grouped-gemm"] and gpus_s == gpus_g == 1 and shape_s == shape_g
    assert "moe-grouped" not in paths_to_train(tmp_path, device, {"count": 1}, None, skip_cp=True)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_fp8_path_is_the_fast_path_with_tensorwise_fp8(tmp_path, device):
    """--fp8: the same shape and flags as the fast (BF16) path, plus the FP8 flags that run without TE."""
    paths = paths_to_train(tmp_path, device, {"count": 1}, None, skip_cp=True, fp8=True)
    tree, flags, gpus = paths["fp8"]
    assert flags == [*paths["fast"][1], "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"] and gpus == 1
    assert "fp8" not in paths_to_train(tmp_path, device, {"count": 1}, None, skip_cp=True)


@pytest.mark.parametrize("device, count, cp2", [("cuda", 2, True), ("cuda", 8, True), ("cuda", 1, False), ("cpu", 0, False)])
def test_context_parallel_2_trains_on_two_gpus_where_there_are_two(tmp_path, device, count, cp2):
    paths = paths_to_train(tmp_path, device, {"count": count}, None, skip_cp=False)
    assert ("cp2" in paths) is cp2
    if cp2:
        tree, flags, gpus = paths["cp2"]
        assert gpus == 2 and flags == [*FAST_FLAGS, "--context-parallel-size", "2"]  # the fast path's, split in two
    assert "cp2" not in paths_to_train(tmp_path, device, {"count": count}, None, skip_cp=True)


def test_exactness_verdict_needs_every_iteration_within_1e_4():
    cp1 = {1: 6.24304, 2: 6.247252, 3: 6.241036}
    assert compare_losses(cp1, dict(cp1), 3)["ok"] and compare_losses(cp1, dict(cp1), 3)["max_relative_difference"] == 0.0
    near = {**cp1, 2: cp1[2] * (1 + 5e-5)}
    assert compare_losses(cp1, near, 3)["ok"]
    off = compare_losses(cp1, {**cp1, 3: cp1[3] * (1 + 2e-4)}, 3)
    assert not off["ok"] and off["max_relative_difference"] == pytest.approx(2e-4)
    missing = compare_losses(cp1, {1: cp1[1], 2: cp1[2]}, 3)
    assert not missing["ok"] and missing["max_relative_difference"] is None


@pytest.fixture(scope="session")
def default_tree(upstream_mirror, tmp_path_factory) -> Path:
    """The default release's pinned tree of the mirror with its whole series applied, on disk (the bench's
    flags are the recipes', which fit the default release)."""
    from rocmpatch.releases import choose
    from testkit.upstream_units.runner import write_tree

    if any(shutil.which(tool) is None for tool in ("make", "g++")):
        pytest.skip("pretrain_gpt.py builds the dataset helpers with make and g++")
    pytest.importorskip("pybind11")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this run checks the CPU path; this machine has a GPU")
    release = choose(None, None).release
    return write_tree(upstream_mirror, release, tmp_path_factory.mktemp("default-patched"), None)


@pytest.mark.upstream
def test_cpu_run_writes_both_paths(default_tree, tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--target", str(default_tree),
                           "--device", "cpu", "--steps", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    fast, explicit = report["paths"]["fast"], report["paths"]["explicit"]
    assert fast["ok"] and explicit["ok"] and report["device"] == "cpu"
    assert fast["tokens_per_second"] > 0 and fast["tflops_per_gpu"] > 0 and fast["mfu"] is None  # no peak for a CPU
    assert all(json.loads(s)["is_causal"] and json.loads(s)["enable_gqa"] for s in fast["sdpa_calls"])
    assert explicit["sdpa_calls"] == {}
    assert any("flash_attention" in name for name in fast["attention_kernels"])  # the CPU's flash kernel
    assert fast["optimizers"] == [{"class": "AdamW", "fused": True, "foreach": None}]
    assert "fast / explicit tokens/s" in proc.stdout
    # No second GPU: context parallel 2 against 1 in fp32 on the CPU, the same losses at every iteration.
    cp = report["context_parallel"]
    assert cp["mode"] == "exactness" and cp["ok"] and "cp2" not in report["paths"], cp
    assert len(cp["losses_cp1"]) == 3 and cp["max_relative_difference"] <= 1e-4
    assert "context parallel 2 against 1 (fp32, CPU, 3 iterations): largest relative loss difference" in proc.stdout


def test_a_failed_round_fails_the_path_and_keeps_the_end_of_its_log(tmp_path):
    """The scratch directory with the logs is gone when the report is read: a failure carries the log's
    last lines, and a failed round is never hidden by a median over the rounds that worked."""
    import train_throughput

    log = tmp_path / "pretrain_gpt.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)) + "fatal error: pybind11/pybind11.h: No such file\n")
    assert train_throughput._tail(log)[-1] == "fatal error: pybind11/pybind11.h: No such file"
    assert len(train_throughput._tail(log)) == 25
    assert train_throughput._tail(tmp_path / "missing.log")[0].startswith("(no log: ")
    worked = {"ok": True, "step_seconds": 1.0, "step_cpu_seconds": 1.0, "tokens_per_second": 10.0, "tflops_per_gpu": 1.0, "mfu": None}
    failed = {"ok": False, "error": "pretrain_gpt.py failed or trained no step", "log_tail": ["boom"]}
    assert train_throughput.combine([worked, failed, worked])["log_tail"] == ["boom"]
    assert train_throughput.combine([worked, dict(worked, step_seconds=3.0)])["step_seconds"] == 2.0


def test_a_timed_out_runs_partial_output_is_logged_as_text():
    """subprocess.TimeoutExpired carries bytes even with text=True: the log must hold the text, not "b'...'"."""
    import training_runs

    assert training_runs._text(b"iteration 1\n\xff") == "iteration 1\n\ufffd"
    assert training_runs._text(None) == "" and training_runs._text("already text") == "already text"
