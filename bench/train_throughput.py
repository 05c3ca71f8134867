"""Training throughput of a patched tree: tokens/s, TFLOP/s and MFU per GPU, peak memory
against rocmpatch's estimate, and the attention kernels the profiler saw, for the fast path (the
llama3-8b recipe's flags: SDPA causal by flag, fusions, fused AdamW) and the explicit attention path
(--attention-backend unfused) side by side. One command, written to one JSON file:

    python bench/train_throughput.py --target DIR [--release NAME] [--device auto|cuda|cpu] [--out result.json]
                                     [--layers auto|N] [--steps N] [--skip-smoke] [--baseline-tree DIR] [--rounds N]

On a GPU (ROCm or CUDA): `rocmpatch smoke` on the GPU first (--skip-smoke to leave it out), then
llama3-8b's shape (hidden 4096, SwiGLU 14336, 32 heads / 8 KV groups, vocab 128256, sequence 8192,
micro-batch 1, global batch 8) with as many layers as the explicit path fits in 80% of the GPU's
memory by the estimate (at most 8; --layers to choose), one process, --steps iterations (default 10,
the first 2 not timed). On the CPU: a tiny shape of the same proportions, for CI (no smoke). Needs
torch and the tree's requirements (numpy, packaging, psutil, pybind11 with make and g++ for the
dataset helpers); smoke needs rocmpatch's own (click, rich, pyyaml). See docs/validation.md.

Context parallelism (cp-attention), under the JSON key "context_parallel": with two GPUs or more,
a "cp2" path trains the fast path's shape and flags with --context-parallel-size 2 on two GPUs, and
cp2_over_cp1_tokens_per_second is its tokens/s over the fast path's (context parallel 1, one GPU,
the same sequence length and global batch; 2.0 would be perfect scaling). With one GPU or none the
exactness check runs instead, on the CPU (two gloo processes): the tiny shape in fp32 trained with
context parallel 2 and 1 on the same global batch, and the largest relative difference of their
losses over every iteration (ok within 1e-4). --skip-context-parallel leaves both out.

--moe adds two MoE paths on one GPU (or the CPU): DeepSeek-V2-Lite's block (MLA, 64 experts of 1408,
top-6, 2 shared; bench/training_runs.moe_flags) with 4 layers, the first dense, on a GPU (a tiny block
with 16 experts on the CPU), with the experts one after another (SequentialMLP, "moe-sequential")
and as torch grouped GEMMs (--moe-grouped-gemm, "moe-grouped"): grouped_over_sequential_moe_tokens_per_second
is their ratio, and the grouped run's line naming its kernel is kept ("moe_grouped_kernel").

--fp8 adds an "fp8" path: the fast path's shape and flags with --fp8-format hybrid --fp8-recipe
tensorwise, which without Transformer Engine runs the attention and MLP linear layers' GEMMs on
torch._scaled_mm (patch fp8-tensorwise-local; e4m3 forward, e5m2 gradients, the device's formats);
fp8_over_fast_tokens_per_second is its tokens/s over the fast path's (BF16), and the path's
"scaled_mm" counts the FP8 GEMMs by operand dtypes, so a run that fell back to BF16 shows none. On
the CPU the FP8 kernel is a reference loop: the ratio there says nothing about a GPU.

--baseline-tree DIR adds a third path: DIR trained with the recipes' flags from before the fast path
(every fusion off, the dataloader's mask), e.g. a tree patched by an older rocmpatch: the step time
ratio of the fast path against it is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_runs import (  # noqa: E402
    DEEPSEEK_V2_LITE, FAST_FLAGS, LLAMA3_8B, OLD_FLAGS, ROOT, TINY, TINY_MOE, Shape, estimate_for, moe_flags, pretrain,
    run_schedule,
)

GIB = 1 << 30
WARMUP = 2
CONTEXT_PARALLEL = ["--context-parallel-size", "2"]
FP8_FLAGS = ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
CP_RELATIVE = 1e-4  # CP 2 against CP 1 in fp32: the same losses but for the order of floating-point sums
TREE_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")


def detect_device(asked: str) -> tuple[str, dict]:
    """('cuda' or 'cpu', facts about the GPU): name, arch, memory, torch's build."""
    import torch

    from rocmpatch.env.facts import gpu_arch

    if asked == "cpu" or (asked == "auto" and not torch.cuda.is_available()):
        return "cpu", {"torch": torch.__version__, "count": 0}
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch build sees no GPU (check HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)")
    props = torch.cuda.get_device_properties(0)
    return "cuda", {"torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
                    "name": props.name, "arch": gpu_arch(torch, 0), "memory_gib": props.total_memory / GIB,
                    "count": torch.cuda.device_count()}


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
    return dataclasses.replace(shape, name=f"{shape.name} ({layers} layers)", layers=layers)


def run_smoke(tree: Path, out_dir: Path, release: str | None) -> dict:
    """`rocmpatch smoke` on the GPU (tiny training runs of 2 iterations): its JSON report, or why not.
    The release is `release`, else the tree's own (from its history), else the default: smoke chooses."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMPATCH_SERIES_DIR": str(ROOT / "patchsets")}
    command = [sys.executable, "-m", "rocmpatch", "smoke", "--target", str(tree), *(["--release", release] if release else []),
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
    return {"ok": bool(report.get("ok")), "release": report.get("release"), "stages": {s["name"]: {"status": s["status"], "detail": s.get("detail", "")}
                                                     for s in report.get("stages", [])}}


def measure(name: str, tree: Path, shape: Shape, flags: list[str], steps: int, device: str, gpu: dict,
            workdir: Path, cpu_memory: bool, gpus: int = 1) -> dict:
    """One path trained on `gpus` GPUs (one process each): rank 0's step times and memory."""
    argv = [*shape.args(), *flags, *run_schedule(steps)]
    run = pretrain(tree, argv, workdir / name, device=device, memory=device == "cpu" and cpu_memory,
                   profile_step=0 if device == "cpu" and cpu_memory else min(WARMUP + 1, steps),
                   timeout=1500 if device == "cpu" else 600, processes=gpus)
    result: dict = {"flags": flags, "gpus": gpus, "log": run.log, "ok": run.ok, "wall_seconds": round(run.seconds, 1)}
    if not run.ok:
        # The log lives in a scratch directory that is gone when the report is read: keep its end.
        result["error"] = "pretrain_gpt.py failed or trained no step"
        result["log_tail"] = _tail(Path(run.log))
        return result
    timed = run.step_seconds(WARMUP) or run.step_seconds(0)
    step = statistics.median(timed)
    tokens = shape.global_batch * shape.seq
    tflops = run.probe["flops_per_step"] / step / 1e12 / gpus  # upstream counts the global batch
    peak = bf16_peak(gpu) if device == "cuda" else None
    est = estimate_for(shape, flags, tree, device, gpus)
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
        "optimizers": run.probe.get("optimizers", []), "scaled_mm": run.probe.get("scaled_mm", {}),
    })
    return result


def paths_to_train(tree: Path, device: str, gpu: dict, baseline: Path | None, skip_cp: bool, moe: bool = False,
                   fp8: bool = False) -> dict:
    """{path: (tree, flags, GPUs[, shape])}: the fast and explicit paths on one GPU, with `fp8` the
    fast path in FP8, the baseline tree's, context parallel 2 on two GPUs where there are two, and
    with `moe` the MoE block with sequential and grouped experts (their own shape)."""
    paths = {"fast": (tree, list(FAST_FLAGS), 1), "explicit": (tree, [*FAST_FLAGS, "--attention-backend", "unfused"], 1)}
    if fp8:
        paths["fp8"] = (tree, [*FAST_FLAGS, *FP8_FLAGS], 1)
    if baseline:
        paths["baseline"] = (baseline.resolve(), list(OLD_FLAGS), 1)
    if not skip_cp and device == "cuda" and gpu["count"] >= 2:
        paths["cp2"] = (tree, [*FAST_FLAGS, *CONTEXT_PARALLEL], 2)
    if moe:
        shape = DEEPSEEK_V2_LITE if device == "cuda" else TINY_MOE
        paths["moe-sequential"] = (tree, [*FAST_FLAGS, *moe_flags(shape)], 1, shape)
        paths["moe-grouped"] = (tree, [*FAST_FLAGS, *moe_flags(shape), "--moe-grouped-gemm"], 1, shape)
    return paths


def compare_losses(cp1: dict[int, float], cp2: dict[int, float], steps: int) -> dict:
    """The exactness check's verdict: every iteration logged by both, and the largest relative
    difference of context parallel 2's loss from context parallel 1's."""
    complete = sorted(cp1) == sorted(cp2) == list(range(1, steps + 1))
    worst = max(abs(cp2[i] - cp1[i]) / abs(cp1[i]) for i in cp1) if complete else None
    return {"losses_cp1": [cp1[i] for i in sorted(cp1)], "losses_cp2": [cp2[i] for i in sorted(cp2)],
            "max_relative_difference": worst, "tolerance": CP_RELATIVE,
            "ok": complete and worst <= CP_RELATIVE}


def context_parallel_exactness(tree: Path, steps: int, workdir: Path) -> dict:
    """CP 2 (two gloo processes) against CP 1 (one), the tiny shape in fp32 on the CPU, the same
    global batch and seed: one process holds the whole sequence, two hold two chunks each."""
    flags = [flag for flag in FAST_FLAGS if flag != "--bf16"]
    runs = {}
    for cp in (1, 2):
        print(f"context parallel {cp}: {TINY.name} in fp32 on the CPU, {cp} process(es), {steps} steps ...", flush=True)
        argv = [*TINY.args(), *flags, "--context-parallel-size", str(cp), *run_schedule(steps)]
        runs[cp] = pretrain(tree, argv, workdir / f"exactness-cp{cp}", device="cpu", processes=cp, timeout=1500)
    result = {"mode": "exactness", "device": "cpu", "shape": vars(TINY), "dtype": "float32",
              **compare_losses(runs[1].losses(), runs[2].losses(), steps)}
    failed = [cp for cp, run in runs.items() if not run.ok]
    if failed:  # its log's scratch directory is gone when the report is read: keep its end
        result.update(ok=False, error=f"pretrain_gpt.py with context parallel {failed[0]} failed or trained no step",
                      log_tail=_tail(Path(runs[failed[0]].log)))
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
    parser.add_argument("--release", default=None, help="the tree's release, for smoke (default: the tree's own, else the default release)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", type=Path, default=Path("train_throughput.json"))
    parser.add_argument("--layers", default="auto")
    parser.add_argument("--steps", type=int, default=None, help="iterations per path (default 10 on a GPU, 4 on the CPU)")
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--baseline-tree", type=Path, help="also train this tree with the recipes' flags from before the fast path")
    parser.add_argument("--cpu-memory", action="store_true", help="on the CPU, also measure the peak (slower)")
    parser.add_argument("--rounds", type=int, default=1, help="train every path this many times, alternating; "
                        "times are the median over rounds (for a shared machine)")
    parser.add_argument("--moe", action="store_true", help="also train the MoE block with sequential and grouped experts")
    parser.add_argument("--fp8", action="store_true", help="also train the fast path in FP8 (--fp8-format hybrid "
                        "--fp8-recipe tensorwise: torch._scaled_mm without Transformer Engine)")
    parser.add_argument("--skip-context-parallel", action="store_true",
                        help="leave out the context-parallel run (two GPUs) or exactness check (one GPU or none)")
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
            report["smoke"] = run_smoke(tree, work, args.release)
            print(f"smoke: {'passed' if report['smoke']['ok'] else 'FAILED'}", flush=True)
        paths = paths_to_train(tree, device, gpu, args.baseline_tree, args.skip_context_parallel, args.moe, args.fp8)
        cp_throughput = "cp2" in paths
        rounds: dict[str, list[dict]] = {name: [] for name in paths}
        for index in range(args.rounds):  # the paths alternate, so a change in the machine's load hits each alike
            for name, (path_tree, flags, gpus, *own_shape) in paths.items():
                path_shape = own_shape[0] if own_shape else shape
                print(f"training {path_shape.name}, {name} path on {gpus} {device.upper()}(s), {steps} steps "
                      f"(round {index + 1}/{args.rounds}) ...", flush=True)
                rounds[name].append(measure(name, path_tree, path_shape, flags, steps, device, gpu, work / str(index),
                                            args.cpu_memory, gpus))
        for name, runs in rounds.items():
            report["paths"][name] = combine(runs)
        fast, explicit = report["paths"]["fast"], report["paths"]["explicit"]
        if fast.get("ok") and explicit.get("ok"):
            report["fast_over_explicit_tokens_per_second"] = fast["tokens_per_second"] / explicit["tokens_per_second"]
        if cp_throughput:
            cp2 = report["paths"]["cp2"]
            report["context_parallel"] = {"mode": "throughput", "gpus": 2, "sequence": shape.seq, "ok": bool(cp2.get("ok")),
                                          "cp2_over_cp1_tokens_per_second": cp2["tokens_per_second"] / fast["tokens_per_second"]
                                          if cp2.get("ok") and fast.get("ok") else None}
        elif not args.skip_context_parallel:
            report["context_parallel"] = context_parallel_exactness(tree, steps, work / "context-parallel")
        if args.fp8 and fast.get("ok") and report["paths"]["fp8"].get("ok"):
            report["fp8_over_fast_tokens_per_second"] = report["paths"]["fp8"]["tokens_per_second"] / fast["tokens_per_second"]
        if args.moe:
            report.update(moe_report(report["paths"]["moe-sequential"], report["paths"]["moe-grouped"], paths))
        if "baseline" in report["paths"] and fast.get("ok") and report["paths"]["baseline"].get("ok"):
            baseline = report["paths"]["baseline"]
            report["baseline_over_fast_step_time"] = baseline["step_seconds"] / fast["step_seconds"]
            report["baseline_over_fast_step_cpu_time"] = baseline["step_cpu_seconds"] / fast["step_cpu_seconds"]
        args.out.write_text(json.dumps(report, indent=1))
    print_summary(report)
    print(f"written: {args.out}")
    failed = [n for n, p in report["paths"].items() if not p.get("ok")]
    smoke_failed = report["smoke"] is not None and not report["smoke"]["ok"]
    cp_failed = "context_parallel" in report and not report["context_parallel"]["ok"]
    return 1 if failed or smoke_failed or cp_failed else 0


MOE_KERNEL = "MoE experts (--moe-grouped-gemm, local):"


def moe_report(sequential: dict, grouped: dict, paths: dict) -> dict:
    """The MoE paths' shape, their tokens/s ratio and the grouped run's kernel line."""
    kernel = None
    try:
        kernel = next((line[line.index(MOE_KERNEL):] for line in Path(grouped["log"]).read_text(errors="replace").splitlines()
                       if MOE_KERNEL in line), None)
    except (OSError, KeyError):
        pass
    ratio = (grouped["tokens_per_second"] / sequential["tokens_per_second"]
             if sequential.get("ok") and grouped.get("ok") else None)
    return {"moe_shape": vars(paths["moe-grouped"][3]), "grouped_over_sequential_moe_tokens_per_second": ratio,
            "moe_grouped_kernel": kernel}


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
    cp = report.get("context_parallel")
    if cp and cp["mode"] == "throughput" and cp["cp2_over_cp1_tokens_per_second"]:
        print(f"context parallel 2 (2 GPUs) / 1 (1 GPU) tokens/s at sequence {cp['sequence']}: "
              f"{cp['cp2_over_cp1_tokens_per_second']:.2f}x")
    elif cp and cp["mode"] == "exactness":
        worst = cp["max_relative_difference"]
        print(f"context parallel 2 against 1 (fp32, CPU, {len(cp['losses_cp1'])} iterations): "
              + (f"largest relative loss difference {worst:.1e} ({'ok' if cp['ok'] else 'FAILED'}, tolerance {cp['tolerance']:g})"
                 if worst is not None else f"FAILED: {cp.get('error', 'iterations missing')}"))
        print("\n".join(f"    {line}" for line in cp.get("log_tail", [])))
    if "fp8_over_fast_tokens_per_second" in report:
        fp8_gemms = report["paths"]["fp8"]["scaled_mm"]
        print(f"fp8 / fast (bf16) tokens/s: {report['fp8_over_fast_tokens_per_second']:.2f}x; torch._scaled_mm calls: "
              + (", ".join(f"{pair} {count}" for pair, count in sorted(fp8_gemms.items())) or "none (not FP8)"))
    if report.get("grouped_over_sequential_moe_tokens_per_second"):
        print(f"MoE ({report['moe_shape']['name']}): grouped / sequential experts tokens/s: "
              f"{report['grouped_over_sequential_moe_tokens_per_second']:.2f}x; {report['moe_grouped_kernel']}")
    if "baseline_over_fast_step_time" in report:
        print(f"step time, baseline (recipes before the fast path) / fast: {report['baseline_over_fast_step_time']:.2f}x wall, "
              f"{report['baseline_over_fast_step_cpu_time']:.2f}x CPU time")


if __name__ == "__main__":
    raise SystemExit(main())
