"""Upstream's own tests/unit_tests, run on CPU against a patched tree and against the baseline.

The baseline is the pinned tree with only the release's import patches (those without which
upstream's tests cannot even be collected: profiles()[release].baseline, from the release's
release.yaml `upstream-tests:`, applied in series order).
The series tree has every patch. Both are written from a Megatron-LM mirror by rocmpatch's own applier, and each is tested the
same way: `python -m pytest -p megatron_on_cpu` in the tree (world size 1, gloo, no network; the
plugin is this folder's megatron_on_cpu.py, no test file edited), one JSON line per test phase in a
log. A process that crashes or hangs is started again without the tests already seen; the test it
was running counts as `crashed`.

A regression is a test that passes on the baseline and not with the whole series. Used by
bench/upstream_unit_tests.py (the whole suite, a long run) and tests/upstream_units/test_upstream_unit_tests.py
(a fixed subset, with the mirror only).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUTCOMES = ("passed", "failed", "error", "skipped", "crashed")


REQUIREMENTS_FILE = "upstream-tests-requirements.txt"  # beside release.yaml: what upstream's tests import on CPU

NVIDIA_ONLY = (
    "transformer_engine", "transformer_engine_torch", "transformer_engine_extensions", "apex", "amp_C",
    "flash_attn", "flash_attn_2_cuda", "flash_attn_3", "flash_attn_interface", "flashattn_hopper",
    "triton", "grouped_gemm", "fused_weight_gradient_mlp_cuda", "fused_layer_norm_cuda",
    "scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda", "scaled_softmax_cuda",
    "mamba_ssm", "causal_conv1d", "nvidia_resiliency_ext", "modelopt", "deep_ep", "flashinfer",
)


@dataclass(frozen=True)
class Profile:
    """How one release's upstream tests are run (its release.yaml `upstream-tests:`)."""

    baseline: tuple[str, ...]  # the patches of the baseline tree (by name): the import patches
    subset: tuple[str, ...]  # paths under the tree the full-tree test runs (minutes, not hours)
    note: str  # what the baseline means for this release
    requirements: Path  # the release folder's upstream-tests-requirements.txt
    block: tuple[str, ...] = NVIDIA_ONLY  # NVIDIA-only modules refused even where installed
    tests_dir: str = "tests/unit_tests"


@functools.cache
def profiles() -> dict[str, Profile]:
    """Every release (of the checkout's patchsets/) whose release.yaml says how its upstream tests run."""
    from rocmpatch.series import find_patchsets

    patchsets = find_patchsets()[0]
    found = {}
    for release in patchsets.releases():
        location = patchsets.location(release)
        tests = location.info.upstream_tests
        if tests is not None:
            found[release] = Profile(tests.baseline, tests.subset, tests.note, location.series_dir / REQUIREMENTS_FILE)
    return found


@dataclass
class Run:
    """One tree's results: nodeid -> outcome, and how long the run took."""

    outcomes: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    restarts: int = 0
    exit_code: int | None = None  # pytest's last exit status (None: killed at the run's time limit)


# ---------------------------------------------------------------- trees


def patch_names(release: str, series_dir: Path | None = None) -> list[str]:
    """The release's patches, in series order."""
    from rocmpatch import series

    return [p.name for p in series.load(series.find_patchsets(series_dir)[0].location(release)).patches]


def write_tree(mirror: Path, release: str, dest: Path, names: tuple[str, ...] | None, series_dir: Path | None = None) -> Path:
    """The release's pin from `mirror` with the patches `names` (None: all) applied in series order, as files in dest."""
    from rocmpatch import gitcmd, series
    from rocmpatch.trees import SeriesApplier

    location = series.find_patchsets(series_dir)[0].location(release)
    loaded = series.load(location)
    repo = gitcmd.open_repo(mirror)
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, loaded.require_lock().upstream.commit))
    unknown = set(names or ()) - {p.name for p in loaded.patches}
    if unknown:
        raise ValueError(f"{location.series_dir / 'series.yaml'} lists no patch {sorted(unknown)}")
    for patch in loaded.patches:
        if names is None or patch.name in names:
            applier.apply(patch)
    paths = {**applier.reader.entries, **applier.changes}
    for path in paths:
        data = applier.read(path)
        if data is not None:
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return dest


def missing_requirements(release: str) -> list[str]:
    """The distributions of the release's requirements file that this interpreter cannot import."""
    from importlib import metadata

    missing = []
    for line in profiles()[release].requirements.read_text().splitlines():
        name = line.split("#")[0].strip()
        if name:
            try:
                metadata.distribution(name.split("=")[0].split("<")[0].split(">")[0].split("[")[0])
            except metadata.PackageNotFoundError:
                missing.append(name)
    return missing


# ---------------------------------------------------------------- running


def run_pytest(tree: Path, paths: list[str], workdir: Path, *, block: tuple[str, ...] = (), test_timeout: int = 300,
               run_timeout: int = 4 * 3600, max_restarts: int = 30, echo=None) -> Run:
    """upstream's tests under `paths` in `tree`, started again after each crash or hang."""
    workdir.mkdir(parents=True, exist_ok=True)
    log, skip = workdir / "log.jsonl", workdir / "seen.txt"
    log.write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHONPATH", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_", "NVTE_"))}
    # python3 on PATH is this interpreter: the dataset helpers are compiled with it (Makefile)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(PYTHONPATH=str(HERE), CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", ROCMPATCH_UNITS_LOG=str(log), ROCMPATCH_UNITS_SKIP=str(skip),
               ROCMPATCH_UNITS_BLOCK=",".join(block), TMPDIR=str(workdir))
    command = [sys.executable, "-m", "pytest", "-p", "megatron_on_cpu", "-p", "no:cacheprovider", "-q",
               "--continue-on-collection-errors", f"--basetemp={workdir / 'basetemp'}", "-W", "ignore",
               # every test, whatever the tree's own addopts say (some releases' pyproject.toml has -x)
               "--maxfail=1000000000"]
    if _has_module("pytest_timeout"):  # a plugin pytest loads by itself
        command.append(f"--timeout={test_timeout}")
    started, result, seen = time.monotonic(), Run(), -1
    with open(workdir / "pytest.out", "ab") as out:
        while True:
            remaining = run_timeout - (time.monotonic() - started)
            proc = subprocess.Popen([*command, *paths], cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=max(remaining, 1))
            except subprocess.TimeoutExpired:
                code = None
            _kill_group(proc)
            result.exit_code = code
            outcomes, running = read_log(log)
            finished = running is None and code in (0, 1, 5)
            stuck = running is None and len(outcomes) == seen  # nothing new since the last start
            if finished or stuck or result.restarts >= max_restarts or remaining <= 0:
                if running:
                    outcomes[running] = "crashed"
                break
            # killed in a test (a crash, a hang, os._exit) or pytest's internal error: skip what ran, go on
            result.restarts += 1
            if running:
                _append_log(log, running)
            seen = len(read_log(log)[0])
            skip.write_text("\n".join(read_log(log)[0]) + "\n")
            if echo:
                echo(f"  restart {result.restarts} after exit {code} (test running: {running or 'none'})")
    result.outcomes, result.seconds = outcomes, time.monotonic() - started
    return result


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _kill_group(proc: subprocess.Popen) -> None:
    """The pytest process and whatever it started (its own session), once it is done or timed out."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _append_log(log: Path, nodeid: str) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(json.dumps({"nodeid": nodeid, "event": "crashed", "outcome": "crashed"}) + "\n")


def read_log(log: Path) -> tuple[dict[str, str], str | None]:
    """Each test's outcome from the plugin's log, and the test still running when the log ends."""
    outcomes: dict[str, str] = {}
    running = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        nodeid, event, outcome = record["nodeid"], record["event"], record.get("outcome")
        if event == "start":
            running = nodeid
            continue
        if event in ("crashed", "collect"):
            outcomes[nodeid] = "crashed" if event == "crashed" else "error"
        elif event == "setup":
            outcomes[nodeid] = {"failed": "error", "skipped": "skipped"}.get(outcome, "running")
        elif event == "call":
            outcomes[nodeid] = outcome
        elif event == "teardown":
            if outcome == "failed" and outcomes.get(nodeid) == "passed":
                outcomes[nodeid] = "error"
            elif outcomes.get(nodeid) == "running":
                outcomes[nodeid] = "error"
            if nodeid == running:
                running = None
    return {k: v for k, v in outcomes.items() if v != "running"}, running


# ---------------------------------------------------------------- comparing


def group_of(nodeid: str, tests_dir: str, depth: int = 1) -> str:
    """The folder under tests_dir that a test (or a file that failed to collect) belongs to."""
    path = nodeid.split("::")[0]
    parts = Path(path).relative_to(tests_dir).parts if path.startswith(tests_dir) else Path(path).parts
    folders = parts[:-1][:depth]
    return "/".join(folders) if folders else "(top level)"


@dataclass(frozen=True)
class Comparison:
    table: dict[str, dict[str, Counter]]  # group -> {"baseline": counts, "series": counts, "delta": counts}
    regressions: list[str]  # passed on the baseline, not with the series
    unlocked: list[str]  # passed with the series only


def compare(baseline: dict[str, str], patched: dict[str, str], tests_dir: str, depth: int = 1) -> Comparison:
    table: dict[str, dict[str, Counter]] = {}
    for which, outcomes in (("baseline", baseline), ("series", patched)):
        for nodeid, outcome in outcomes.items():
            row = table.setdefault(group_of(nodeid, tests_dir, depth), {"baseline": Counter(), "series": Counter(), "delta": Counter()})
            row[which][outcome] += 1
    regressions = sorted(n for n, o in baseline.items() if o == "passed" and patched.get(n) != "passed")
    unlocked = sorted(n for n, o in patched.items() if o == "passed" and baseline.get(n) != "passed")
    for nodeid in regressions:
        table[group_of(nodeid, tests_dir, depth)]["delta"]["regressed"] += 1
    for nodeid in unlocked:
        table[group_of(nodeid, tests_dir, depth)]["delta"]["unlocked"] += 1
    return Comparison(dict(sorted(table.items())), regressions, unlocked)


def render(comparison: Comparison, patched: dict[str, str]) -> str:
    """The per-folder table (passed/failed+error/skipped/crashed per tree), then every regression."""
    def cell(counts: Counter) -> str:
        return f"{counts['passed']}/{counts['failed'] + counts['error']}/{counts['skipped']}/{counts['crashed']}"

    lines = [f"{'folder':<34} {'baseline p/f/s/c':>20} {'series p/f/s/c':>20} {'unlocked':>9} {'regressed':>9}"]
    totals = {"baseline": Counter(), "series": Counter(), "delta": Counter()}
    for group, row in comparison.table.items():
        for key in totals:
            totals[key].update(row[key])
        lines.append(f"{group:<34} {cell(row['baseline']):>20} {cell(row['series']):>20} "
                     f"{row['delta']['unlocked']:>9} {row['delta']['regressed']:>9}")
    lines.append(f"{'total':<34} {cell(totals['baseline']):>20} {cell(totals['series']):>20} "
                 f"{totals['delta']['unlocked']:>9} {totals['delta']['regressed']:>9}")
    for nodeid in comparison.regressions:
        lines.append(f"REGRESSION {nodeid}: {patched.get(nodeid, 'not run')} with the series")
    return "\n".join(lines)
