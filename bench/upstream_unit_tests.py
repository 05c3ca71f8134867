"""Upstream's own tests/unit_tests on CPU: the whole series against the import patches only.

    ROCMPATCH_TEST_UPSTREAM=<git mirror of NVIDIA/Megatron-LM> python bench/upstream_unit_tests.py \\
        [--release NAME] [--baseline-patches N | NAME,NAME] [--target DIR] [--paths tests/unit_tests/models,...] \\
        [--workdir DIR] [--jobs 2] [--depth 1] [--json FILE]

Writes two trees from the mirror into the work folder: the pin with the baseline's patches (by
default the release's import patches, its release.yaml `upstream-tests:`; --baseline-patches
takes the first N, or names) and the pin
with the whole series (or tests --target, an existing patched checkout, instead). Runs upstream's
tests in each with testkit/upstream_units/megatron_on_cpu.py (world size 1, gloo, no network; no
upstream file edited), then prints per folder passed/failed/skipped/crashed on each tree, the tests
the series unlocks, and every regression (passed on the baseline, not with the series). Exit 1 when
there is a regression. The trees' Python requirements come from
patchsets/<release>/upstream-tests-requirements.txt (pip install -r it first). --release: default
the --target's own release (from its history), else the default release.

The whole suite is long (core_v0.19.0: about 8,600 tests; see docs/validation.md for the time it
took on a 2-core machine); --paths runs part of it. --jobs 2 runs both trees at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch and testkit

from testkit.upstream_units import runner  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default=None, choices=sorted(runner.profiles()))
    parser.add_argument("--baseline-patches", default=None, help="the baseline's patches: the first N, or comma-separated names (default: the release's import patches)")
    parser.add_argument("--target", type=Path, default=None, help="test this patched checkout instead of writing the whole series from the mirror")
    parser.add_argument("--paths", default=None, help="comma-separated paths in the tree (default: the whole tests dir)")
    parser.add_argument("--workdir", type=Path, default=None, help="where trees, logs and pytest output go (default: a new temporary folder, kept)")
    parser.add_argument("--jobs", type=int, default=1, choices=(1, 2))
    parser.add_argument("--depth", type=int, default=1, help="folder levels per row of the table")
    parser.add_argument("--test-timeout", type=int, default=300, help="seconds one test may take (pytest-timeout)")
    parser.add_argument("--json", type=Path, default=None, help="write every test's outcome on both trees here")
    args = parser.parse_args()
    mirror = os.environ.get("ROCMPATCH_TEST_UPSTREAM")
    if not mirror:
        print("set ROCMPATCH_TEST_UPSTREAM to a git mirror of NVIDIA/Megatron-LM", file=sys.stderr)
        return 2
    from rocmpatch.releases import choose

    args.release = choose(None, args.release, target=args.target).release
    if args.release not in runner.profiles():
        print(f"release {args.release} has no upstream-tests: in its release.yaml", file=sys.stderr)
        return 2
    profile = runner.profiles()[args.release]
    missing = runner.missing_requirements(args.release)
    if missing:
        print(f"not installed: {', '.join(missing)}: pip install -r {profile.requirements.relative_to(ROOT)}", file=sys.stderr)
        return 2
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="rocmpatch-units-"))).absolute()
    names = runner.patch_names(args.release)
    if args.baseline_patches is None:
        baseline = profile.baseline
    elif args.baseline_patches.isdigit():
        baseline = tuple(names[: int(args.baseline_patches)])
    else:
        baseline = tuple(args.baseline_patches.split(","))
    paths = args.paths.split(",") if args.paths else [profile.tests_dir]

    trees = {"baseline": workdir / "baseline" / "Megatron-LM", "series": (args.target or workdir / "series" / "Megatron-LM").absolute()}
    start = time.monotonic()
    for name, patches in (("baseline", baseline), ("series", None)):
        if name == "series" and args.target:
            continue
        if not trees[name].exists():
            runner.write_tree(Path(mirror.removeprefix("file://")), args.release, trees[name], patches)
    print(f"{args.release}: baseline = pin + {', '.join(baseline) or 'no patch'} ({profile.note}); "
          f"trees written in {time.monotonic() - start:.0f} s; in {workdir}", flush=True)

    def run(name: str) -> runner.Run:
        result = runner.run_pytest(trees[name], paths, workdir / name / "run", block=profile.block, test_timeout=args.test_timeout,
                                   echo=lambda line: print(f"{name}:{line}", flush=True))
        print(f"{name}: {len(result.outcomes)} tests in {result.seconds / 60:.1f} min ({result.restarts} restart(s), "
              f"last pytest exit {result.exit_code}; output in {workdir / name / 'run' / 'pytest.out'})", flush=True)
        return result

    with ThreadPoolExecutor(args.jobs) as pool:
        base_run, series_run = pool.map(run, ["baseline", "series"])
    comparison = runner.compare(base_run.outcomes, series_run.outcomes, profile.tests_dir, args.depth)
    print(runner.render(comparison, series_run.outcomes))
    if args.json:
        args.json.write_text(json.dumps({"release": args.release, "baseline_patches": list(baseline), "paths": paths,
                                         "seconds": {"baseline": base_run.seconds, "series": series_run.seconds},
                                         "baseline": base_run.outcomes, "series": series_run.outcomes}, indent=1, sort_keys=True))
    return 1 if comparison.regressions else 0


if __name__ == "__main__":
    sys.exit(main())
