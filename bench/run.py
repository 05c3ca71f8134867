"""Timings on the real Megatron-LM tree, printed as ratios. Nothing here asserts.

    ROCMPATCH_TEST_UPSTREAM=<git mirror of NVIDIA/Megatron-LM> python bench/run.py [--release NAME] [--series-dir DIR]

- fetch: the shallow fetch of the pinned commit into an empty cache vs `git clone --bare` of the
  same mirror (time and bytes on disk);
- apply: a new target from a warm cache (the whole series kept there by the first new target) vs git
  alone making a checkout of the pin (init, shallow fetch from the cache, checkout); the first new
  target for a series (it commits the series into the cache); the no-op re-run;
- verify: the in-process check with rocmpatch's stat cache (as apply leaves it), without it (every
  file read and hashed), vs `git hash-object --no-filters` of every file (git hashing the same
  bytes) and `git status` (which trusts the target's own index);
- read-only commands: the whole `rocmpatch verify`, `status`, `--version` and `--help` commands (a
  new Python process each, as a user runs them) vs `git status` (goal: at most 0.3 s each);

Scratch directories are made in $TMPDIR: put it on the file system your targets live on, since
checkout time is mostly file creation.
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
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch


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
    parser.add_argument("--release", default=None)
    parser.add_argument("--skip-clone", action="store_true", help="leave out the full clone fetch is compared with (slow)")
    args = parser.parse_args()
    mirror = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not mirror:
        print("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rocmpatch-bench-") as scratch:
        tmp = Path(scratch)
        os.environ["ROCMPATCH_CACHE_DIR"] = str(tmp / "cache")
        from rocmpatch import releases, series, statcache, store
        from rocmpatch.operations import applying, verifying

        loaded = series.load(releases.choose(args.series_dir, args.release).location)
        lock = loaded.locked()

        shallow_s = timed(lambda: store.cached_repo(lock.upstream, mirror, progress=False))
        shallow_b = disk_bytes(store.commit_path(lock.upstream.commit))
        if not args.skip_clone:
            full_s = timed(lambda: subprocess.run(["git", "clone", "-q", "--bare", "--no-local", mirror, str(tmp / "full.git")], check=True))
            full_b = disk_bytes(tmp / "full.git")
            print(f"fetch   shallow {shallow_s:6.2f} s {shallow_b / 2**20:7.1f} MiB | full clone {full_s:6.2f} s {full_b / 2**20:7.1f} MiB"
                  f" | ratio time {full_s / shallow_s:5.1f}x, bytes {full_b / shallow_b:5.1f}x")

        target = tmp / "Megatron-LM"
        first_s = timed(lambda: applying.apply(loaded, tmp / "first"))  # makes the series' commits and keeps them in the cache
        counter = iter(range(100))
        apply_s = timed(lambda: applying.apply(loaded, tmp / f"kept{next(counter)}"), repeat=3)
        applying.apply(loaded, target)
        noop_s = timed(lambda: applying.apply(loaded, target), repeat=3)

        def plain_checkout() -> None:
            # git alone: a new repository, the cached commit fetched shallowly, checked out.
            plain = tmp / f"plain{next(counter)}"
            for args in (["init", "-q", str(plain)], ["-C", str(plain), "fetch", "-q", "--depth", "1", f"file://{store.commit_path(lock.upstream.commit)}", lock.upstream.commit],
                         ["-C", str(plain), "checkout", "-q", lock.upstream.commit]):
                subprocess.run(["git", *args], check=True, capture_output=True)

        checkout_s = timed(plain_checkout, repeat=3)
        print(f"apply   new target {apply_s:6.2f} s (goal <= 0.5) ({len(loaded.patches)} patches, .git {disk_bytes(target / '.git') / 2**20:.1f} MiB)"
              f" | git init + fetch + checkout of the pin {checkout_s:6.2f} s | ratio {apply_s / checkout_s:5.2f}x"
              f" | the first for this series {first_s:5.2f} s | re-run (no-op) {noop_s:5.2f} s")

        status_s = timed(lambda: subprocess.run(["git", "-C", str(target), "status", "--porcelain"], check=True, capture_output=True), repeat=5)
        assert verifying.verify(loaded, target).ok
        verify_s = timed(lambda: verifying.verify(loaded, target), repeat=5)
        files = [str(p.relative_to(target)) for p in target.rglob("*") if p.relative_to(target).parts[0] != ".git" and p.is_file() and not p.is_symlink()]
        listed = "".join(f + "\n" for f in files).encode()
        hash_s = timed(lambda: subprocess.run(["git", "-C", str(target), "hash-object", "--no-filters", "--stdin-paths"], check=True,
                                              capture_output=True, input=listed), repeat=5)
        recorded = statcache.path_for(target)
        recorded.rename(recorded.with_suffix(".aside"))  # no stat cache: every file read and hashed
        try:
            cold_s = timed(lambda: verifying.verify(loaded, target), repeat=5)
        finally:
            recorded.with_suffix(".aside").rename(recorded)
        size = sum((target / f).stat().st_size for f in files)
        print(f"verify  in-process {verify_s * 1000:6.0f} ms (stat cache) | {cold_s * 1000:6.0f} ms reading all {len(files)} files ({size / 2**20:.0f} MiB)"
              f" | git hash-object of every file {hash_s * 1000:6.0f} ms | git status {status_s * 1000:5.0f} ms"
              f" | ratios to hash-object {verify_s / hash_s:5.2f}x and {cold_s / hash_s:5.2f}x, to git status {verify_s / status_s:4.1f}x")
        where = ["--series-dir", str(args.series_dir)] if args.series_dir else []
        bare_s = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeat=5)
        for name, extra in (("verify", ["verify", "--target", str(target), *where]), ("status", ["status", "--target", str(target), *where]),
                            ("--version", ["--version"]), ("--help", ["--help"])):
            command = [sys.executable, "-m", "rocmpatch", *extra]
            cli_s = timed(lambda: subprocess.run(command, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}), repeat=5)
            print(f"command rocmpatch {name:<9} {cli_s * 1000:6.0f} ms (goal <= 300) | git status {status_s * 1000:5.0f} ms | ratio {cli_s / status_s:6.1f}x"
                  f" | of which Python start-up {bare_s * 1000:4.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
