"""Timings on the real Megatron-LM tree, printed as ratios. Nothing here asserts.

    ROCMPATCH_TEST_UPSTREAM=<git mirror of NVIDIA/Megatron-LM> python bench/run.py [--series-dir DIR]

- fetch: the shallow fetch of the pinned commit into an empty cache vs `git clone --bare` of the
  same mirror (time and bytes on disk);
- apply: a new target from a warm cache (the whole series), then the no-op re-run;
- verify: the in-process check and the whole `rocmpatch verify` command vs `git status`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def timed(action, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series-dir", type=Path, default=None)
    args = parser.parse_args()
    mirror = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not mirror:
        print("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rocmpatch-bench-") as scratch:
        tmp = Path(scratch)
        os.environ["ROCMPATCH_CACHE_DIR"] = str(tmp / "cache")
        from rocmpatch import applying, series, store, verifying

        loaded = series.load(series.locate(args.series_dir))
        lock = loaded.locked()

        shallow_s = timed(lambda: store.cached_repo(lock.upstream, mirror, progress=False))
        shallow_b = disk_bytes(store.commit_path(lock.upstream.commit))
        full_s = timed(lambda: subprocess.run(["git", "clone", "-q", "--bare", "--no-local", mirror, str(tmp / "full.git")], check=True))
        full_b = disk_bytes(tmp / "full.git")
        print(f"fetch   shallow {shallow_s:6.2f} s {shallow_b / 2**20:7.1f} MiB | full clone {full_s:6.2f} s {full_b / 2**20:7.1f} MiB"
              f" | ratio time {full_s / shallow_s:5.1f}x, bytes {full_b / shallow_b:5.1f}x")

        target = tmp / "Megatron-LM"
        apply_s = timed(lambda: applying.apply(loaded, target))
        noop_s = timed(lambda: applying.apply(loaded, target), repeat=3)
        checkout_s = timed(lambda: subprocess.run(["git", "clone", "-q", "--no-local", "--depth", "1", f"file://{store.commit_path(lock.upstream.commit)}", str(tmp / "plain")], check=True, capture_output=True))
        print(f"apply   new target {apply_s:6.2f} s ({len(loaded.patches)} patches, .git {disk_bytes(target / '.git') / 2**20:.1f} MiB)"
              f" | plain shallow clone {checkout_s:6.2f} s | ratio {apply_s / checkout_s:5.1f}x | re-run (no-op) {noop_s:5.2f} s")

        status_s = timed(lambda: subprocess.run(["git", "-C", str(target), "status", "--porcelain"], check=True, capture_output=True), repeat=5)
        verify_s = timed(lambda: verifying.verify(loaded, target), repeat=5)
        command = [sys.executable, "-m", "rocmpatch", "verify", "--target", str(target)] + (["--series-dir", str(args.series_dir)] if args.series_dir else [])
        cli_s = timed(lambda: subprocess.run(command, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}), repeat=3)
        print(f"verify  in-process {verify_s * 1000:6.0f} ms | command {cli_s * 1000:6.0f} ms (goal <= 500) | git status {status_s * 1000:6.0f} ms"
              f" | ratio in-process/git status {verify_s / status_s:5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
