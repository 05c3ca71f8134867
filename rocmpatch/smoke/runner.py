"""Runs the stages in order, each in its own child process with a timeout.

A child gets its own session (process group) so a timeout or Ctrl-C can stop it and everything it
started (torchrun and its workers) at once: SIGTERM first, so torchrun can stop its workers, then
SIGKILL. A crash, a hang or a missing result line becomes that stage's failure with the child's last
output lines; a stage whose prerequisite did not pass is skipped with the reason. Import, ops and
train follow the release's smoke profile (profile.py); a release without one skips them, saying so.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rocmpatch.series import Location
from rocmpatch.smoke import blame
from rocmpatch.smoke.profile import PROFILED_STAGES, SmokeProfile, no_profile_reason, profile_of
from rocmpatch.smoke.supervise import ChildOutcome, child_env, run_child

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


def stage_command(module: str, config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", module, json.dumps(config)]


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
