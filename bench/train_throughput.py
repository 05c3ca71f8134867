"""Training throughput of the patched core_v0.19.0 tree: tokens/s, TFLOP/s and MFU per GPU, peak memory
against rocmpatch's estimate, and the attention kernels the profiler saw, for the fast path (the
llama3-8b recipe's flags: SDPA causal by flag, fusions, fused AdamW) and the explicit attention path
(--attention-backend unfused) side by side. One command, written to one JSON file:

    python bench/train_throughput.py --target DIR [--device auto|cuda|cpu] [--out result.json]
                                     [--layers auto|N] [--steps N] [--skip-smoke] [--baseline-tree DIR] [--rounds N]

On a GPU (ROCm or CUDA): `rocmpatch smoke` on the GPU first (--skip-smoke to leave it out), then
llama3-8b's shape (hidden 4096, SwiGLU 14336, 32 heads / 8 KV groups, vocab 128256, sequence 8192,
micro-batch 1, global batch 8) with as many layers as the explicit path fits in 80% of the GPU's
memory by the estimate (at most 8; --layers to choose), one process, --steps iterations (default 10,
the first 2 not timed). On the CPU: a tiny shape of the same proportions, for CI (no smoke). Needs
torch and the tree's requirements (numpy, packaging, psutil, pybind11 with make and g++ for the
dataset helpers); smoke needs rocmpatch's own (click, rich, pyyaml). See docs/validation.md.

--baseline-tree DIR adds a third path: DIR trained with the recipes' flags from before the fast path
(every fusion off, the dataloader's mask), e.g. a tree patched by an older rocmpatch: the step time
ratio of the fast path against it is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_runs import FAST_FLAGS, LLAMA3_8B, OLD_FLAGS, ROOT, TINY, Shape, estimate_for, pretrain, run_schedule  # noqa: E402

GIB = 1 << 30
WARMUP = 2
TREE_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")


def detect_device(asked: str) -> tuple[str, dict]:
    """('cuda' or 'cpu', facts about the GPU): name, arch, memory, torch's build."""
    import torch

    if asked == "cpu" or (asked == "auto" and not torch.cuda.is_available()):
        return "cpu", {"torch": torch.__version__}
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch build sees no GPU (check HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)")
    props = torch.cuda.get_device_properties(0)
    arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
    return "cuda", {"torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
                    "name": props.name, "arch": arch.split(":")[0], "memory_gib": props.total_memory / GIB}


def bf16_peak(gpu: dict) -> float | None:
    from rocmpatch.preflight.peaks import peak_for

    peak = peak_for(gpu.get("arch", ""), gpu.get("name", ""))
    return peak.bf16_tflops if peak else None


def choose_layers(asked: str, gpu: dict, tree: Path) -> int:
    """The most layers (at most 8) whose explicit-path estimate fits in 80% of the GPU's memory."""
    if asked != "auto":
        return int(asked)
    explicit = [*FAST_FLAGS, "--attention-backend", "unfused"]
    fitting = [n for n in range(1, 9)
               if estimate_for(_with_layers(LLAMA3_8B, n), explicit, tree, "cuda").total_gib <= 0.8 * gpu["memory_gib"]]
    return max(fitting, default=1)


def _with_layers(shape: Shape, layers: int) -> Shape:
    return Shape(f"{shape.name} ({layers} layers)", layers, shape.hidden, shape.ffn, shape.heads, shape.groups, shape.seq,
                 shape.vocab, shape.micro_batch, shape.global_batch)


def run_smoke(tree: Path, out_dir: Path) -> dict:
    """`rocmpatch smoke` on the GPU (tiny training runs of 2 iterations): its JSON report, or why not."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMPATCH_SERIES_DIR": str(ROOT / "patchsets")}
    command = [sys.executable, "-m", "rocmpatch", "smoke", "--target", str(tree), "--release", "core_v0.19.0",
               "--train-iters", "2", "--json"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=420, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": "smoke did not finish in 420 s"}
    (out_dir / "smoke.log").write_text(proc.stdout + proc.stderr)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "detail": f"smoke did not run: {last} (smoke needs click, rich and pyyaml; or pass --skip-smoke)"}
    return {"ok": bool(report.get("ok")), "stages": {s["name"]: {"status": s["status"], "detail": s.get("detail", "")}
                                                     for s in report.get("stages", [])}}


def measure(name: str, tree: Path, shape: Shape, flags: list[str], steps: int, device: str, gpu: dict,
            workdir: Path, cpu_memory: bool) -> dict:
    argv = [*shape.args(), *flags, *run_schedule(steps)]
    run = pretrain(tree, argv, workdir / name, device=device, memory=device == "cpu" and cpu_memory,
                   profile_step=0 if device == "cpu" and cpu_memory else min(WARMUP + 1, steps),
                   timeout=1500 if device == "cpu" else 600)
    result: dict = {"flags": flags, "log": run.log, "ok": run.ok, "wall_seconds": round(run.seconds, 1)}
    if not run.ok:
        # The log lives in a scratch directory that is gone when the report is read: keep its end.
        result["error"] = "pretrain_gpt.py failed or trained no step"
        result["log_tail"] = _tail(Path(run.log))
        return result
    timed = run.step_seconds(WARMUP) or run.step_seconds(0)
    step = statistics.median(timed)
    tokens = shape.global_batch * shape.seq
    tflops = run.probe["flops_per_step"] / step / 1e12
    peak = bf16_peak(gpu) if device == "cuda" else None
    est = estimate_for(shape, flags, tree, device)
    measured = run.probe.get("peak_bytes")
    result.update({
        "step_seconds": step, "steps_timed": len(timed), "step_seconds_each": run.probe["step_seconds"],
        "step_cpu_seconds": statistics.median(run.probe["step_cpu_seconds"][WARMUP:] or run.probe["step_cpu_seconds"]),
        "tokens_per_second": tokens / step,
        "tflops_per_gpu": tflops, "mfu": tflops / peak if peak else None,
        "peak_memory_gib": measured / GIB if measured else None, "peak_memory_how": run.probe.get("peak_how"),
        "estimate_gib": est.total_gib, "estimate": est.to_json(),
        "peak_over_estimate": (measured / GIB) / est.total_gib if measured else None,
        "attention_kernels": run.probe.get("attention_ops", {}), "sdpa_calls": run.probe.get("sdpa", {}),
        "optimizers": run.probe.get("optimizers", []),
    })
    return result


def combine(runs: list[dict]) -> dict:
    """One path's result over rounds: the first round's, with the median step time over rounds."""
    failed = [r for r in runs if not r.get("ok")]
    if failed:  # one failed round fails the path: a median over the rounds that worked would hide it
        return dict(failed[0])
    first = dict(runs[0])
    if len(runs) > 1:
        step = statistics.median(r["step_seconds"] for r in runs)
        scale = first["step_seconds"] / step
        first.update(step_seconds=step, step_seconds_per_round=[r["step_seconds"] for r in runs],
                     step_cpu_seconds=statistics.median(r["step_cpu_seconds"] for r in runs),
                     step_cpu_seconds_per_round=[r["step_cpu_seconds"] for r in runs],
                     tokens_per_second=first["tokens_per_second"] * scale, tflops_per_gpu=first["tflops_per_gpu"] * scale,
                     mfu=first["mfu"] * scale if first.get("mfu") else first.get("mfu"))
    return first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True, help="the patched tree (megatron/ and pretrain_gpt.py)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", type=Path, default=Path("train_throughput.json"))
    parser.add_argument("--layers", default="auto")
    parser.add_argument("--steps", type=int, default=None, help="iterations per path (default 10 on a GPU, 4 on the CPU)")
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--baseline-tree", type=Path, help="also train this tree with the recipes' flags from before the fast path")
    parser.add_argument("--cpu-memory", action="store_true", help="on the CPU, also measure the peak (slower)")
    parser.add_argument("--rounds", type=int, default=1, help="train every path this many times, alternating; "
                        "times are the median over rounds (for a shared machine)")
    args = parser.parse_args()
    tree = args.target.resolve()
    missing = [name for name in ("megatron/core", *TREE_FILES) if not (tree / name).exists()]
    if missing:
        raise SystemExit(f"{tree}: not a Megatron-LM tree, no {', '.join(missing)} (a tarball of the patched tree needs "
                         f"megatron/ and {', '.join(TREE_FILES)}, which pretrain_gpt.py imports)")
    device, gpu = detect_device(args.device)
    steps = args.steps or (10 if device == "cuda" else 4)
    shape = _with_layers(LLAMA3_8B, choose_layers(args.layers, gpu, tree)) if device == "cuda" else TINY
    report: dict = {"device": device, "gpu": gpu, "peak_bf16_tflops": bf16_peak(gpu) if device == "cuda" else None,
                    "shape": vars(shape), "steps": steps, "warmup_steps": WARMUP, "smoke": None, "paths": {}}
    with tempfile.TemporaryDirectory(prefix="rocmpatch-throughput-") as scratch:
        work = Path(scratch)
        if device == "cuda" and not args.skip_smoke:
            print("smoke on the GPU ...", flush=True)
            report["smoke"] = run_smoke(tree, work)
            print(f"smoke: {'passed' if report['smoke']['ok'] else 'FAILED'}", flush=True)
        paths = {"fast": (tree, list(FAST_FLAGS)), "explicit": (tree, [*FAST_FLAGS, "--attention-backend", "unfused"])}
        if args.baseline_tree:
            paths["baseline"] = (args.baseline_tree.resolve(), list(OLD_FLAGS))
        rounds: dict[str, list[dict]] = {name: [] for name in paths}
        for index in range(args.rounds):  # the paths alternate, so a change in the machine's load hits each alike
            for name, (path_tree, flags) in paths.items():
                print(f"training {shape.name}, {name} path, {steps} steps (round {index + 1}/{args.rounds}) ...", flush=True)
                rounds[name].append(measure(name, path_tree, shape, flags, steps, device, gpu, work / str(index),
                                            args.cpu_memory))
        for name, runs in rounds.items():
            report["paths"][name] = combine(runs)
        fast, explicit = report["paths"]["fast"], report["paths"]["explicit"]
        if fast.get("ok") and explicit.get("ok"):
            report["fast_over_explicit_tokens_per_second"] = fast["tokens_per_second"] / explicit["tokens_per_second"]
        if "baseline" in report["paths"] and fast.get("ok") and report["paths"]["baseline"].get("ok"):
            baseline = report["paths"]["baseline"]
            report["baseline_over_fast_step_time"] = baseline["step_seconds"] / fast["step_seconds"]
            report["baseline_over_fast_step_cpu_time"] = baseline["step_cpu_seconds"] / fast["step_cpu_seconds"]
        args.out.write_text(json.dumps(report, indent=1))
    print_summary(report)
    print(f"written: {args.out}")
    failed = [n for n, p in report["paths"].items() if not p.get("ok")]
    smoke_failed = report["smoke"] is not None and not report["smoke"]["ok"]
    return 1 if failed or smoke_failed else 0


def _tail(log: Path, lines: int = 25) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return [f"(no log: {exc.strerror})"]


def print_summary(report: dict) -> None:
    gpu = report["gpu"]
    where = f"{gpu.get('name')} ({gpu.get('arch')})" if report["device"] == "cuda" else f"CPU (torch {gpu['torch']})"
    print(f"{report['shape']['name']} on {where}")
    print(f"{'path':<9} {'step s':>8} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} {'peak GiB':>9} {'est GiB':>8}  attention kernels")
    for name, p in report["paths"].items():
        if not p.get("ok"):
            print(f"{name:<9} failed: {p.get('error')}; the end of its log:")
            print("\n".join(f"    {line}" for line in p.get("log_tail", [])))
            continue
        mfu = f"{p['mfu']:.1%}" if p.get("mfu") else "-"
        peak = f"{p['peak_memory_gib']:.2f}" if p.get("peak_memory_gib") else "-"
        kernels = ", ".join(sorted(p["attention_kernels"], key=lambda k: -p["attention_kernels"][k])[:3]) or "-"
        print(f"{name:<9} {p['step_seconds']:8.3f} {p['tokens_per_second']:10.0f} {p['tflops_per_gpu']:8.2f} {mfu:>6} "
              f"{peak:>9} {p['estimate_gib']:8.2f}  {kernels}")
    if "fast_over_explicit_tokens_per_second" in report:
        print(f"fast / explicit tokens/s: {report['fast_over_explicit_tokens_per_second']:.2f}x")
    if "baseline_over_fast_step_time" in report:
        print(f"step time, baseline (recipes before the fast path) / fast: {report['baseline_over_fast_step_time']:.2f}x wall, "
              f"{report['baseline_over_fast_step_cpu_time']:.2f}x CPU time")


if __name__ == "__main__":
    raise SystemExit(main())
