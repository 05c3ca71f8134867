"""drift over the whole range pin -> REF, against the naive loop (check out every commit of REF's
first-parent line and apply the series there), measured on a sample of commits and extrapolated.

    ROCMPATCH_TEST_UPSTREAM=<mirror> python bench/bench_drift.py [--series-dir patchsets] [--release NAME] [--ref main] [--sample 20]

Prints both times and their ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's rocmpatch

from rocmpatch import gitcmd, releases, series, store  # noqa: E402
from rocmpatch.operations import drift  # noqa: E402


def naive_seconds(mirror: Path, patch_files: list[Path], commits: list[str]) -> float:
    """Per commit: `git checkout` of the full tree, then `git apply --check` of the series."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / "work"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(mirror), str(work)], check=True)
        started = time.monotonic()
        for commit in commits:
            subprocess.run(["git", "-C", str(work), "checkout", "-q", "-f", commit], check=True)
            # git apply allows offsets where rocmpatch does not: if anything kinder to the naive loop.
            subprocess.run(["git", "-C", str(work), "apply", "--check", *map(str, patch_files)], capture_output=True)
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series-dir", type=Path, default=None)
    parser.add_argument("--release", default=None, help="default: the default release")
    parser.add_argument("--ref", default="main")
    parser.add_argument("--sample", type=int, default=20)
    args = parser.parse_args()
    mirror = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not mirror:
        sys.exit("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM")
    mirror_path = Path(mirror.removeprefix("file://"))
    loaded = series.load(releases.choose(args.series_dir, args.release).location)
    pin = loaded.locked().upstream.commit
    repo, commits = store.history_repo(str(mirror_path), [pin, args.ref])

    started = time.monotonic()
    report = drift.run_drift(repo, [p.patch for p in loaded.patches], pin, commits[args.ref], to_ref=args.ref)
    fast = time.monotonic() - started

    line = gitcmd.first_parent_line(repo, report.base, commits[args.ref])
    sample = sorted(random.Random(0).sample(line, min(args.sample, len(line))), key=line.index)
    sampled = naive_seconds(mirror_path, [p.path for p in loaded.patches], sample)
    naive = sampled / len(sample) * len(line)

    print(f"commits on {args.ref}'s first-parent line since the merge base: {len(line)} ({report.candidates} touch the series)")
    print(f"drift, whole range:                 {fast:8.1f} s")
    print(f"naive loop, {len(sample)} sampled commits:   {sampled:8.1f} s -> {naive:8.1f} s extrapolated to {len(line)}")
    print(f"ratio naive / drift:                {naive / fast:8.0f}x")


if __name__ == "__main__":
    main()
