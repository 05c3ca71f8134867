"""Running one child process in its own session, and nothing it started left behind: the
supervisor smoke's stages and torchrun launches share (runner.py runs the stages; launch.py the
workers). It imports nothing of smoke's orchestration, so a torchrun worker does not either.

A child gets its own session (process group) so a timeout or Ctrl-C can stop it and everything it
started (torchrun and its workers) at once: SIGTERM first, so torchrun can stop its workers, then
SIGKILL; whatever carries the run's marker in its environment and is still alive is stopped too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rocmpatch.processes import interruption_point
from rocmpatch.smoke.child import STEP_MARKER

TERMINATE_GRACE = 5.0
TAIL_LINES = 20
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # so children import this rocmpatch


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
              on_step: Callable[[str], None] | None = None,
              on_line: Callable[[str], None] | None = None) -> ChildOutcome:
    """Run argv in its own session; its result line, last output lines and how it ended. Nothing
    it started is left running when this returns. Its progress lines (child.step) go to on_step,
    every other line it prints, as it comes, to on_line."""
    marker = f"{os.getpid()}_{time.monotonic_ns()}"
    try:
        return _run_child(argv, {**env, f"{STRAY_MARKER}_{marker}": "1"}, timeout, cwd, on_step, on_line)
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
               on_step: Callable[[str], None] | None = None,
               on_line: Callable[[str], None] | None = None) -> ChildOutcome:
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
            if on_line is not None:
                on_line(line)
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
