"""DotProductAttention: torch SDPA (the default with patch sdpa-attention) against the explicit path
(--attention-backend unfused), one causal training step (forward + backward), batch 1.

    python bench/bench_attention.py [--tree DIR] [--release NAME] [--seq 2048 4096 8192] [--heads 2]
                                    [--head-dim 64] [--dtype fp32|bf16] [--device cpu|cuda] [--repeat 2]

--release: whose series builds the tree (the attention harness is testkit/checks/attention.py,
the same for every release); default the --tree's own release (from its history), else the default release. --tree: a Megatron-LM tree with
that series applied (`rocmpatch apply --target DIR`); without it, megatron/ of the release's test
wheel (release.yaml `wheel:`, testkit/megatron_wheel.py) with the series applied through
sdpa-attention, written to a temporary directory.
Each (sequence, path) point runs in its own child process. Time: best of --repeat steps after one
warm-up step. Peak memory: on a GPU torch.cuda.max_memory_allocated during the warm-up step; on
the CPU the growth of the process's peak RSS during it (VmHWM, reset through /proc/self/clear_refs;
ru_maxrss where that is not possible, which the import's own peak may hide at small sizes). Also
printed: the bytes of one [batch, heads, s, s] score matrix, which the explicit path materializes
several times (scores, probabilities, their gradients). Prints ratios; asserts nothing; not in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from child_json import run_json_child  # bench/, beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch and testkit
PATHS = (("sdpa", "auto"), ("explicit", "unfused"))


def attention_checks():
    """testkit/checks/attention.py: the attention harness the series tests run."""
    import importlib

    return importlib.import_module("testkit.checks.attention")


def release_of(tree: Path | None, asked: str | None) -> str:
    """--release, else the release `tree`'s history is based on, else the default (as rocmpatch chooses)."""
    from rocmpatch.releases import choose

    return choose(None, asked, target=tree).release


def build_tree(dest: Path, release: str) -> Path:
    from testkit import harness

    chosen = harness.Release(release)
    return harness.wheel_tree(chosen, dest, chosen.patches(through="sdpa-attention"))


def status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(args: argparse.Namespace) -> None:
    """One point: prints {"seconds": ..., "peak_bytes": ..., "memory": how}."""
    sys.path.insert(0, str(args.tree))  # the tree's megatron first, before this checkout
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    checks = attention_checks()

    checks.stub_unguarded_triton()
    with tempfile.TemporaryDirectory() as work:
        checks.setup(Path(work), args.device)
        import torch

        dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
        module = checks.make(args.backend, heads=args.heads, groups=args.heads, kv=args.head_dim,
                             dtype="bf16" if args.dtype == "bf16" else None)
        module.train()
        q, k, v = checks.inputs(args.seq_one, args.seq_one, 1, args.heads, args.heads, args.head_dim, dtype, device=args.device)
        cuda = args.device != "cpu"

        def step():
            for t in (q, k, v):
                t.grad = None
            module(q, k, v, None).float().sum().backward()
            if cuda:
                torch.cuda.synchronize()

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            step()
            peak, how = torch.cuda.max_memory_allocated() - base, "torch.cuda.max_memory_allocated"
        elif reset_peak_rss():
            base = status_kib("VmRSS")
            step()
            peak, how = (status_kib("VmHWM") - base) * 1024, "VmHWM growth"
        else:
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            step()
            peak, how = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024, "ru_maxrss growth"
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "peak_bytes": peak, "memory": how, "use_sdpa": module.use_sdpa}))


def run_point(args: argparse.Namespace, tree: Path, seq: int, backend: str) -> dict:
    command = [sys.executable, __file__, "--child", "--tree", str(tree), "--release", args.release,
               "--seq-one", str(seq), "--backend", backend,
               "--heads", str(args.heads), "--head-dim", str(args.head_dim), "--dtype", args.dtype,
               "--device", args.device, "--repeat", str(args.repeat)]
    return run_json_child(command, args.device, f"point seq={seq} {backend}")


def mib(n: float) -> str:
    return f"{n / 2**20:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--release", default=None, help="the release whose harness runs (default: the tree's, else the default)")
    parser.add_argument("--seq", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seq-one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    args.release = release_of(args.tree, args.release)
    with tempfile.TemporaryDirectory() as scratch:
        tree = args.tree or build_tree(Path(scratch) / "tree", args.release)
        itemsize = 2 if args.dtype == "bf16" else 4
        print(f"DotProductAttention {args.release}, causal, batch 1, {args.heads} heads x {args.head_dim}, "
              f"{args.dtype}, {args.device}, forward+backward, best of {args.repeat}")
        print(f"{'seq':>6} {'scores MiB':>10} {'sdpa s':>8} {'expl s':>8} {'time x':>7} "
              f"{'sdpa MiB':>8} {'expl MiB':>8} {'mem x':>7}  memory measured as")
        for seq in args.seq:
            sdpa, explicit = (run_point(args, tree, seq, backend) for _, backend in PATHS)
            assert sdpa["use_sdpa"] and not explicit["use_sdpa"]
            scores = args.heads * seq * seq * itemsize
            mem_ratio = explicit["peak_bytes"] / sdpa["peak_bytes"] if sdpa["peak_bytes"] > 0 else float("inf")
            print(f"{seq:>6} {mib(scores):>10} {sdpa['seconds']:8.3f} {explicit['seconds']:8.3f} "
                  f"{explicit['seconds'] / sdpa['seconds']:6.2f}x {mib(sdpa['peak_bytes'])} {mib(explicit['peak_bytes'])} "
                  f"{mem_ratio:6.2f}x  {sdpa['memory']}", flush=True)
        print("time x, mem x: explicit / sdpa (above 1: SDPA is faster / smaller)")


if __name__ == "__main__":
    main()
