"""Stage 5, train: the target's own training script trains a tiny GPT on mock data.

torchrun starts one worker per selected GPU, or two CPU workers over gloo (passed explicitly as
--distributed-backend gloo: the patched trees train on CPU when asked to); tensor parallelism spans
the workers when there are two or more (the largest of 8/4/2 dividing their number and the head
count). What every release shares is here: the model's size, the data (--mock-data), the tokenizer
(NullTokenizer with --vocab-size, so nothing is downloaded), precision, backend and parallelism. What
differs between releases comes from the release's smoke profile (release.yaml `smoke.train`): the
script (pretrain_gpt.py), flags for every run or platform, and the runs themselves (core_v0.5.0: the
legacy model path and --use-mcore-models --transformer-impl local; core_v0.19.0: a Llama-shaped run
and a DeepSeek-shaped one). A run with --num-experts gets the expert parallel size too: the largest
of 8/4/2 dividing the experts and the workers, so the MoE token dispatch crosses them. Megatron
compiles its dataset helpers (megatron/core/datasets/helpers.cpp) at start, with make, a C++ compiler and
`python3 -m pybind11`, so those are checked first. Pass: every iteration logged, losses finite, the
last below the first, for every run. GPU and CPU runs differ only in train_args.Profile (and the
profile's cpu-args / gpu-args).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

from rocmpatch.megatron_args import flag_value, gpu_launch_environment
from rocmpatch.smoke.child import CUDA_ONLY_MESSAGES, StageFailure, in_target, is_nvidia_only, stage_main, step, target_root
from rocmpatch.smoke.launch import launcher_timeout, torchrun
from rocmpatch.smoke.profile import SmokeProfile, TrainProfile, TrainRun
from rocmpatch.smoke.train_args import layout_for, pretrain_args, profile_for

ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")
ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
LOSS = re.compile(r"lm loss:\s*([0-9.eE+-]+|nan|inf|-inf)", re.IGNORECASE)
TRACE_FILE = re.compile(r'File "([^"]+)", line (\d+)')
MISSING = re.compile(r"No module named '([^']+)'")
EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(?:Error|Exception)\b")
NEEDS_GPU = (*CUDA_ONLY_MESSAGES, "Megatron requires CUDA")


def parse_log(lines: list[str]) -> list[dict[str, float]]:
    steps = []
    for line in lines:
        found = ITERATION.search(line)
        loss = LOSS.search(line)
        if found and loss:
            elapsed = ELAPSED.search(line)
            steps.append({"iteration": int(found.group(1)), "loss": float(loss.group(1)),
                          "ms": float(elapsed.group(1)) if elapsed else math.nan})
    return steps


def error_line(lines: list[str]) -> str | None:
    """The last exception line a worker printed (not torchrun's own ChildFailedError summary)."""
    return next((line for line in reversed(lines)
                 if EXCEPTION.match(line.strip()) and "ChildFailedError" not in line), None)


def traceback_culprits(lines: list[str], target: str) -> tuple[list[str], str | None]:
    """Target files in the last traceback of a worker's output that goes through the target
    (innermost first; torchrun's own traceback comes after it), and a missing module."""
    root = target_root(target)
    blocks: list[list[str]] = [[]]
    missing = None
    for line in lines:
        if "Traceback (most recent call last)" in line:
            blocks.append([])
        found = TRACE_FILE.search(line)
        rel = in_target(found.group(1), root) if found else None
        if rel is not None:
            blocks[-1].append(rel)
        gone = MISSING.search(line)
        if gone:
            missing = gone.group(1)
    files = next((block for block in reversed(blocks) if block), [])
    ordered: list[str] = []
    for path in reversed(files):
        if path not in ordered:
            ordered.append(path)
    return ordered, missing


def helper_build_problem() -> str | None:
    """What stops Megatron compiling its dataset helpers at start, or None."""
    missing = [tool for tool in ("make",) if shutil.which(tool) is None]
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++)")
    python3 = shutil.which("python3")
    if python3 is None:
        missing.append("python3 on PATH")
    else:
        probe = subprocess.run([python3, "-m", "pybind11", "--includes"], capture_output=True, text=True)
        if probe.returncode != 0:
            missing.append(f"pybind11 for {python3} (pip install pybind11)")
    if missing:
        return ("Megatron compiles megatron/core/datasets/helpers.cpp at start and needs "
                + ", ".join(missing))
    return None


def precision_flag(platform: str) -> str:
    import torch

    if platform == "cpu":
        return "bf16"  # torch's CPU kernels do bf16; the series casts what they refuse to mix
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


# Lines Megatron prints on its way to the first iteration (the releases that print them), as steps.
MILESTONES = (("using world size:", "Megatron imported, its arguments parsed"),
              ("> initializing torch distributed", "initializing torch.distributed"),
              ("> compiling dataset index builder", "compiling the dataset helpers"),
              ("> building train, validation, and test datasets", "building the datasets"),
              ("training ...", "training"))


def iteration_steps(path: str, iters: int):
    """An on_line for the run: the start-up milestones and each iteration Megatron logs become steps
    (progress in a pipe too)."""
    def on_line(line: str) -> None:
        milestone = next((what for start, what in MILESTONES if line.strip().startswith(start)), None)
        if milestone is not None:
            step(f"{path} path: {milestone}")
        for found in parse_log([line]):
            step(f"{path} path: iteration {found['iteration']}/{iters}, loss {found['loss']:.3f}")
    return on_line


def worker_env(platform: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # Megatron's iteration lines as they come, not at exit
    if platform != "cpu":
        env.update(gpu_launch_environment({}, env))
    if platform == "cpu":  # --device cpu on a GPU machine: Megatron must not find the GPUs
        env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    return env


def train_once(config: dict[str, Any], train: TrainProfile, one: TrainRun, precision: str,
               timeout: float) -> dict[str, Any]:
    platform = config.get("platform") or "cpu"
    profile = profile_for(platform)
    target, world = config["target"], int(config.get("world_size") or 1)
    iters = int(config.get("train_iters") or profile.iterations)
    path = one.name
    args = pretrain_args(profile, world, iters, precision, train.flags(one, platform))
    step(f"{path} path: {train.script} on {world} process(es), {iters} iterations (the first run builds the dataset helpers)")
    outcome = torchrun(world, "rocmpatch.smoke.script", [target, train.script, *args],
                       timeout, Path(target), worker_env(platform), on_line=iteration_steps(path, iters))
    steps = parse_log(outcome.stdout)
    run: dict[str, Any] = {"path": path, "args": train.flags(one, platform), "iterations": len(steps),
                           "seconds": round(outcome.seconds, 1)}
    if flag_value(run["args"], "--num-experts") is not None:  # the size pretrain_args chose
        run["expert_parallel"] = int(flag_value(args, "--expert-model-parallel-size") or 1)
    if outcome.timed_out or outcome.returncode != 0 or len(steps) < iters:
        lines = outcome.stdout + outcome.stderr
        culprits, missing = traceback_culprits(lines, target)
        why = (f"no result within {timeout:g}s" if outcome.timed_out
               else f"torchrun exited with code {outcome.returncode}")
        gpu_only = error_line([line for line in lines if any(m in line for m in NEEDS_GPU)])
        last = gpu_only or error_line(lines) or (outcome.tail[-1] if outcome.tail else "no output")
        cannot = "this tree cannot train on CPU: " if platform == "cpu" and gpu_only else ""
        raise StageFailure(f"{path} path: {cannot}{why} after {len(steps)}/{iters} iterations: "
                           f"{last.strip()[:300]}",
                           culprits=culprits, missing_module=missing,
                           nvidia_only=bool(missing and is_nvidia_only(missing)), last_output=outcome.tail)
    losses = [s["loss"] for s in steps]
    timed = [s["ms"] for s in steps[2:] if not math.isnan(s["ms"])] or [s["ms"] for s in steps]
    tokens = profile.micro_batch_size * layout_for(profile, world).dp * profile.seq_length
    ms = statistics.median(timed)
    run.update(first_loss=losses[0], last_loss=losses[-1], ms_per_iteration=ms,
               tokens_per_s=round(tokens / (ms / 1000.0)) if ms > 0 else None)
    if not all(math.isfinite(v) for v in losses):
        bad = next(s for s in steps if not math.isfinite(s["loss"]))
        raise StageFailure(f"{path} path: loss {bad['loss']} at iteration {bad['iteration']}", runs=[run])
    if not losses[-1] < losses[0]:
        raise StageFailure(f"{path} path: loss did not fall ({losses[0]:.3f} -> {losses[-1]:.3f} "
                           f"over {len(losses)} iterations)", runs=[run])
    return run


def run(config: dict[str, Any]) -> dict[str, Any]:
    target = Path(config["target"])
    platform = config.get("platform") or "cpu"
    train = SmokeProfile.from_config(config["profile"]).train
    if not (target / train.script).is_file():
        return {"status": "skipped", "detail": f"core-only tree: there is no {train.script} to train with"}
    problem = helper_build_problem()
    if problem:
        raise StageFailure(problem)
    precision = precision_flag(platform)
    budget = launcher_timeout(config)
    world = int(config.get("world_size") or 1)
    runs, failures = [], []
    for one in train.runs:  # every run, so one report shows all even when the first fails
        try:
            runs.append(train_once(config, train, one, precision, budget / len(train.runs)))
        except StageFailure as failure:
            failures.append(failure)
            runs.extend(failure.extra.pop("runs", []) or [{"path": one.name, "error": failure.detail}])
    if failures:
        first = failures[0]
        more = "".join(f"; {other.detail}" for other in failures[1:])
        raise StageFailure(first.detail + more, **first.extra, runs=runs)
    profile = profile_for(platform)
    layout = layout_for(profile, world)
    where = "CPU" if platform == "cpu" else "GPU"
    summary = "; ".join(f"{r['path']}{' EP=%d' % r['expert_parallel'] if 'expert_parallel' in r else ''} "
                        f"loss {r['first_loss']:.2f}->{r['last_loss']:.2f}, {r['tokens_per_s']} tokens/s" for r in runs)
    return {"runs": runs, "precision": precision, "tensor_parallel": layout.tp, "backend": profile.backend,
            "detail": f"GPT {profile.num_layers}x{profile.hidden_size} seq {profile.seq_length}, {precision}, "
                      f"TP={layout.tp} DP={layout.dp}, {profile.backend} on {where}, "
                      f"{runs[0]['iterations']} iterations: {summary}"}


if __name__ == "__main__":
    stage_main(run)
