"""The size of a port: how a release's series carries onto other upstream refs (`rebase --report`),
as counts of exact / 3-way / conflict patches per ref, to compare a series before and after it is
reshaped.

    ROCMPATCH_TEST_UPSTREAM=<mirror> python bench/bench_rebase_report.py [--release NAME] [--series-dir DIR] [REF ...]

REFs default to the pinned refs of the other releases in upstream.lock (newest first), then main;
the release to the default one.
Prints one line per ref (its commit and date: main moves), the conflicting patches and their files
with --files, the seconds each report took; asserts nothing, writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's rocmpatch

from rocmpatch import gitcmd, releases, series, store  # noqa: E402
from rocmpatch.operations import rebase_report  # noqa: E402



def default_refs(patchsets, release: str) -> list[str]:
    """The other releases' pinned refs, newest first, then main: the refs a port goes to."""
    locks = patchsets.lock_file().releases
    others = sorted((lock.upstream for name, lock in locks.items() if name != release), key=lambda u: u.date, reverse=True)
    return [upstream.ref for upstream in others] + ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="*", metavar="REF")
    parser.add_argument("--release", default=None)
    parser.add_argument("--series-dir", type=Path, default=None)
    parser.add_argument("--files", action="store_true", help="each conflicting patch's files too")
    args = parser.parse_args()
    mirror = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not mirror:
        sys.exit("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM")
    location = releases.choose(args.series_dir, args.release).location
    loaded = series.load(location)
    args.refs = args.refs or default_refs(location.patchsets, location.release)
    pin = loaded.locked().upstream.commit
    repo, commits = store.history_repo(mirror.removeprefix("file://"), [pin, *args.refs])
    patches = list(loaded.patches)
    print(f"{location.release}: {len(patches)} patches, pinned at {pin[:12]}")
    print(f"{'onto':<14} {'commit':<12} {'date':<10} {'exact':>5} {'3-way':>5} {'conflict':>8} {'seconds':>7}")
    for ref in args.refs:
        found = rebase_report.report(repo, location.release, pin, commits[ref], ref, patches)
        totals = found.totals
        date = gitcmd.commit_info(repo, commits[ref]).date[:10]
        print(f"{ref:<14} {commits[ref][:12]:<12} {date:<10} {totals['exact']:>5} {totals['3-way']:>5} {totals['conflict']:>8} {found.seconds:>7.1f}")
        conflicting = [p for p in found.patches if p.result == rebase_report.CONFLICT]
        if args.files:
            for item in conflicting:
                print(f"    {item.name}: " + ", ".join(f"{c.path} ({c.kind})" for c in item.conflicts))
        else:
            print(f"    conflict: {', '.join(p.name for p in conflicting) or '-'}")


if __name__ == "__main__":
    main()
