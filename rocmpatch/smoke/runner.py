"""Runs the stages in order, each in its own child process with a timeout.

A child gets its own session (process group) so a timeout or Ctrl-C can stop it and everything it
started (torchrun and its workers) at once: SIGTERM first, so torchrun can stop its workers, then
SIGKILL. A crash, a hang or a missing result line becomes that stage's failure with the child's last
output lines; a stage whose prerequisite did not pass is skipped with the reason. Import, ops and
train follow the release's smoke profile (profile.py); a release without one skips them, saying so.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rocmpatch.series import Location
from rocmpatch.processes import interruption_point
from rocmpatch.smoke import blame
from rocmpatch.smoke.child import STEP_MARKER
from rocmpatch.smoke.profile import PROFILED_STAGES, SmokeProfile, no_profile_reason, profile_of

STAGES = ("environment", "import", "ops", "collectives", "train")
MODULES = {
    "environment": "rocmpatch.smoke.environment",
    "import": "rocmpatch.smoke.imports",
    "ops": "rocmpatch.smoke.ops",
    "collectives": "rocmpatch.smoke.collectives",
    "train": "rocmpatch.smoke.train",
}
PREREQUISITES = {
    "environment": (),
    "import": ("environment",),
    "ops": ("import",),
    "collectives": ("environment",),
    "train": ("import", "ops", "collectives"),
}
# What each stage does, said when it starts (its child then reports its steps).
STAGE_WORK = {
    "environment": "importing torch and asking it for the GPUs",
    "import": "importing the patched tree's modules, watching for NVIDIA-only ones",
    "ops": "comparing each torch replacement with an fp32 reference",
    "collectives": "all-reduce, all-gather and broadcast over torchrun",
    "train": "a tiny pretrain_gpt.py run per path",
}
# Seconds; generous because a first run on a GPU compiles kernels and the dataset helpers.
DEFAULT_TIMEOUTS = {"environment": 120, "import": 240, "ops": 300, "collectives": 300, "train": 1200}
TERMINATE_GRACE = 5.0
TAIL_LINES = 20
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # so children import this rocmpatch


@dataclass
class StageResult:
    name: str
    status: str  # passed | failed | skipped
    seconds: float
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2),
                "detail": self.detail, **self.extra}


@dataclass
class Plan:
    target: Path
    device: str = "auto"  # auto | rocm | cuda | cpu
    gpus: list[int] | None = None
    train_iters: int | None = None  # None: the train stage's default for the platform
    timeouts: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TIMEOUTS))
    series: Location | None = None  # where the series is, for pointing failures at patches
    stages: tuple[str, ...] = STAGES
    # What import, ops and train do for this release; None: the series' release.yaml says (and
    # without one, those stages are skipped, saying there is no profile).
    profile: SmokeProfile | None = None

    def release_profile(self) -> SmokeProfile | None:
        if self.profile is None and self.series is not None:
            self.profile = profile_of(self.series.info, self.series.release)
        return self.profile

    @property
    def release(self) -> str | None:
        return self.profile.release if self.profile else (self.series.release if self.series else None)


@dataclass
class ChildOutcome:
    result: dict[str, Any] | None
    tail: list[str]
    returncode: int | None
    seconds: float
    timed_out: bool = False
    stdout: list[str] = field(default_factory=list)  # every stdout line, for stages that parse logs
    stderr: list[str] = field(default_factory=list)  # every stderr line (workers' tracebacks)


def child_env(selection: dict[str, Any] | None) -> dict[str, str]:
    """The environment of every child: ours, this rocmpatch importable, the GPU selection applied."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    for name in (selection or {}).get("unset", []):
        env.pop(name, None)
    env.update((selection or {}).get("set", {}))
    return env


def last_result(lines: list[str]) -> dict[str, Any] | None:
    """The last stdout line that is a JSON object with a status: the stage's result."""
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "status" in value:
                return value
    return None


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is left."""
    for sig, wait in ((signal.SIGTERM, TERMINATE_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            # The leader is gone; make sure the rest of its group is too.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def stage_command(module: str, config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", module, json.dumps(config)]


STRAY_MARKER = "ROCMPATCH_SMOKE_CHILD"  # ROCMPATCH_SMOKE_CHILD_<run>=1 in the environment of everything a stage starts


def stop_strays(marker: str, wait: float = 5.0) -> None:
    """SIGKILL every process still carrying `marker` in its environment: torchrun starts its
    workers in sessions of their own, so stopping the stage's process group can miss them, and a
    worker must not outlive its stage. Each run_child adds a variable of its own, so a nested one
    (a stage starting torchrun) keeps the outer run's, and the outer sweep still finds what a
    stage killed outright had started. Linux (/proc) only; a no-op elsewhere."""
    needle = f"{STRAY_MARKER}_{marker}=1".encode()
    deadline = time.monotonic() + wait
    while True:
        found = []
        try:
            entries = os.listdir("/proc")
        except OSError:
            return
        for entry in entries:
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if needle not in handle.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    if handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                        continue  # already dead, waiting to be reaped
                os.kill(int(entry), signal.SIGKILL)
                found.append(entry)
            except (OSError, IndexError):
                continue
        if not found or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def run_child(argv: list[str], env: dict[str, str], timeout: float, cwd: Path,
              on_step: Callable[[str], None] | None = None) -> ChildOutcome:
    """Run argv in its own session; its result line, last output lines and how it ended. Nothing
    it started is left running when this returns. Its progress lines (child.step) go to on_step."""
    marker = f"{os.getpid()}_{time.monotonic_ns()}"
    try:
        return _run_child(argv, {**env, f"{STRAY_MARKER}_{marker}": "1"}, timeout, cwd, on_step)
    finally:
        stop_strays(marker)


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM wait until the block is done (the list says whether one came): a
    KeyboardInterrupt raised inside Popen, after the fork, would lose the only handle on a child
    that goes on to start torchrun and its workers. Main thread only (elsewhere a no-op)."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield held
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_child(argv: list[str], env: dict[str, str], timeout: float, cwd: Path,
               on_step: Callable[[str], None] | None = None) -> ChildOutcome:
    start = time.monotonic()
    with interrupts_held() as held:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, text=True, errors="replace", bufsize=1)
        interruption_point("smoke-child-started")  # tests: a Ctrl-C that comes while Popen returns
    stdout: list[str] = []
    stderr: list[str] = []
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def pump(stream, keep: list[str] | None) -> None:
        for line in stream:
            line = line.rstrip("\n")
            if line.startswith(STEP_MARKER):
                if on_step is not None:
                    on_step(line[len(STEP_MARKER):])
                continue
            if keep is not None:
                keep.append(line)
            if line.strip():
                tail.append(line)

    readers = [threading.Thread(target=pump, args=(process.stdout, stdout), daemon=True),
               threading.Thread(target=pump, args=(process.stderr, stderr), daemon=True)]
    timed_out = False
    try:  # from the moment the child exists, whatever ends this stops its whole group
        if held:
            raise KeyboardInterrupt
        for reader in readers:
            reader.start()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_group(process)
    except BaseException:  # Ctrl-C: stop the children, then let the caller report it
        stop_group(process)
        raise
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of its group outlived the leader
    except (ProcessLookupError, PermissionError):
        pass
    for reader in readers:
        reader.join(timeout=2.0)
    result = None if timed_out else last_result(stdout)
    lines = [line for line in tail if last_result([line]) is None]
    return ChildOutcome(result, lines, process.returncode, time.monotonic() - start, timed_out, stdout, stderr)


def outcome_to_result(name: str, outcome: ChildOutcome, timeout: float,
                      index: dict[str, list[str]], target: Path | None = None) -> StageResult:
    if outcome.timed_out:
        return StageResult(name, "failed", outcome.seconds,
                           f"no result after {timeout:g}s (hung or too slow); stopped it",
                           {"last_output": outcome.tail})
    if outcome.result is None:
        code = outcome.returncode
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}")
        last = outcome.tail[-1] if outcome.tail else "no output"
        return StageResult(name, "failed", outcome.seconds, f"child {how} without a result: {last}",
                           {"last_output": outcome.tail})
    extra = dict(outcome.result)
    status = extra.pop("status")
    detail = extra.pop("detail", "")
    if status not in ("passed", "failed", "skipped"):
        status, detail = "failed", f"child reported unknown status {status!r}: {detail}"
    if status == "failed":
        clause = blame.hint(extra.get("culprits") or [], extra.get("missing_module"),
                            bool(extra.get("nvidia_only")), index, target)
        if clause:
            detail = f"{detail} — {clause}"
        extra.setdefault("last_output", outcome.tail)
    return StageResult(name, status, extra.pop("seconds", outcome.seconds), detail, extra)


def run_stages(plan: Plan, on_result: Callable[[StageResult], None] | None = None,
               on_step: Callable[[str, str], None] | None = None) -> list[StageResult]:
    """Every stage of the plan in order; Ctrl-C (or SIGTERM) stops the running stage's processes,
    marks it failed and skips the rest, then raises Interrupted. on_step(stage, what) hears what
    the running stage is doing: its start, then each step it reports."""
    if threading.current_thread() is not threading.main_thread():
        return _run_stages(plan, on_result, on_step)
    # Children live in their own sessions, so a SIGTERM to smoke must stop them like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run_stages(plan, on_result, on_step)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame) -> None:  # noqa: ARG001 - signal handler protocol
    raise KeyboardInterrupt


def _run_stages(plan: Plan, on_result: Callable[[StageResult], None] | None,
                on_step: Callable[[str, str], None] | None = None) -> list[StageResult]:
    results: dict[str, StageResult] = {}
    index = blame.patch_index(plan.series)
    profile = plan.release_profile()
    selection: dict[str, Any] | None = None
    config: dict[str, Any] = {"target": str(plan.target.resolve()), "device": plan.device,
                              "gpus": plan.gpus, "train_iters": plan.train_iters,
                              "profile": profile.to_config() if profile else None}
    interrupted = False
    for name in plan.stages:
        blocking = [p for p in PREREQUISITES[name] if p in plan.stages and results[p].status != "passed"]
        if interrupted:
            result = StageResult(name, "skipped", 0.0, "interrupted")
        elif profile is None and name in PROFILED_STAGES:
            result = StageResult(name, "skipped", 0.0, no_profile_reason(plan.release), {"no_profile": True})
        elif blocking:
            result = StageResult(name, "skipped", 0.0, f"needs {blocking[0]}, which {results[blocking[0]].status}")
        else:
            timeout = float(plan.timeouts.get(name, DEFAULT_TIMEOUTS[name]))
            stage_step = None
            if on_step is not None:
                on_step(name, f"{STAGE_WORK[name]} (at most {timeout:g}s)")
                stage_step = functools.partial(on_step, name)
            try:
                outcome = run_child(stage_command(MODULES[name], {**config, "timeout": timeout}),
                                    child_env(selection), timeout, plan.target, stage_step)
                result = outcome_to_result(name, outcome, timeout, index, plan.target)
            except KeyboardInterrupt:
                interrupted = True
                result = StageResult(name, "failed", 0.0, "interrupted (Ctrl-C); its processes were stopped")
            if name == "environment" and result.status == "passed":
                selection = result.extra.get("selection")
                config.update(platform=result.extra.get("platform"), world_size=result.extra.get("world_size"))
        results[name] = result
        if on_result:
            on_result(result)
    if interrupted:
        raise Interrupted(list(results.values()))
    return list(results.values())


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run; carries what was reported so far."""

    def __init__(self, results: list[StageResult]) -> None:
        super().__init__("interrupted")
        self.results = results
