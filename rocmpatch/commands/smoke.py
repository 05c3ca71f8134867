"""`rocmpatch smoke`: does the patched tree work on this machine's GPUs (or CPU)? See docs/smoke.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rich.text import Text

from rocmpatch.commands import selected
from rocmpatch.console import emit_json, err, is_terminal, note, out
from rocmpatch.errors import EnvironmentProblem, ExitCode, UsageError
from rocmpatch.smoke import devices
from rocmpatch.smoke.profile import no_profile_reason, profile_of
from rocmpatch.smoke.runner import Interrupted, Plan, StageResult, run_stages
from rocmpatch.target import require_tree
from rocmpatch.tables import Table

DEVICES = ("auto", "rocm", "cuda", "cpu")
STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def run(*, target: Path, gpus: str | None = None, device: str = "auto", train_iters: int | None = None,
        as_json: bool = False, series_dir: Path | None = None, release: str | None = None,
        timeouts: dict[str, float] | None = None) -> ExitCode:
    if device not in DEVICES:
        raise UsageError(f"--device {device!r}: not one of {', '.join(DEVICES)}")
    try:
        gpu_list = devices.parse_gpus(gpus)
    except ValueError as error:
        raise UsageError(str(error), hint="give distinct GPU indices as torch sees them, e.g. --gpus 0,1") from None
    if train_iters is not None and train_iters < 2:
        raise UsageError(f"--train-iters {train_iters}: needs at least 2 iterations to see the loss fall")
    target = target.expanduser().absolute()
    require_tree(target, "megatron/core/__init__.py")
    if importlib.util.find_spec("torch") is None:
        raise EnvironmentProblem("smoke needs PyTorch, which is not installed in this Python",
                                 hint=devices.ROCM_INSTALL)
    location = selected(series_dir, release, target=target)
    plan = Plan(target=target, device=device, gpus=gpu_list, train_iters=train_iters, series=location,
                profile=profile_of(location.info, location.release))  # a bad profile stops here, before any stage
    if plan.profile is None:
        note(no_profile_reason(location.release) + ": running environment and collectives only")
    if timeouts:
        plan.timeouts.update(timeouts)

    interrupted = False
    with Progress() as progress:
        try:
            results = run_stages(plan, on_result=progress.result, on_step=progress.step)
        except Interrupted as stop:
            results, interrupted = stop.results, True
    ok = not interrupted and all(r.status != "failed" for r in results)
    if as_json:
        emit_json(report(plan, results, ok))
    else:
        render(plan, results)
    if interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.OK if ok else ExitCode.CHECK_FAILED


class Progress:
    """What smoke is doing, on stderr: on a terminal one Rich status line that follows each stage's
    steps (with the finished stages printed above it); otherwise (a log, CI) one plain line per step."""

    def __init__(self) -> None:
        self._status = None

    def __enter__(self) -> "Progress":
        if is_terminal():
            self._status = err.rich.status("smoke: starting", spinner="dots")
            self._status.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._status is not None:
            self._status.__exit__(*exc_info)

    def step(self, stage: str, what: str) -> None:
        if self._status is not None:
            self._status.update(Text(f"smoke: {stage}: {what}"))
        else:
            err.print(f"smoke: {stage}: {what}", markup=False)

    def result(self, result: StageResult) -> None:
        line = f"smoke: {result.name} {result.status} ({result.seconds:.1f}s)"
        if self._status is not None:
            self._status.console.print(Text(line))
        else:
            err.print(line, markup=False)


def report(plan: Plan, results: list[StageResult], ok: bool) -> dict[str, Any]:
    environment = next((r for r in results if r.name == "environment"), None)
    return {
        "target": str(plan.target),
        "release": plan.release,
        "device": plan.device,
        "platform": environment.extra.get("platform") if environment else None,
        "gpus": plan.gpus,
        "ok": ok,
        "stages": [r.to_json() for r in results],
    }


def render(plan: Plan, results: list[StageResult]) -> None:
    table = Table("stage", "status", "seconds", "detail", title=f"rocmpatch smoke {plan.target} ({plan.release or 'no release'})",
                  title_justify="left", whole=("stage", "status"))
    for result in results:
        table.add_row(result.name, Text(result.status, style=STYLE[result.status]), f"{result.seconds:.1f}",
                      Text(result.detail))
    out.print(table)
    for result in results:
        if result.status == "failed" and result.extra.get("hint"):
            err.print(f"smoke: {result.name}: hint: {result.extra['hint']}", markup=False)
        lines = result.extra.get("last_output") or []
        if result.status == "failed" and lines:
            err.print(f"last output of {result.name}:", markup=False)
            for line in lines[-12:]:
                err.print(f"  {line}", markup=False)
