"""What a `recipe launch` run prints: each line as it comes, except Megatron's list of every argument
(about 800 lines on rank 0, between "--- arguments ---" and "--- end of arguments ---"), which the
console shows as one line; with --log FILE every line, that list included, is appended to FILE too."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import TextIO

from rocmpatch.errors import UsageError

ARGUMENTS_START = re.compile(r"^-+ arguments -+$")
ARGUMENTS_END = re.compile(r"^-+ end of arguments -+$")


def refuse_log_inside(log: Path, target: Path) -> None:
    """UsageError for a --log FILE inside the checkout: verify would count it as an edit."""
    if log.resolve().is_relative_to(target.resolve()):
        raise UsageError(f"--log {log}: inside the checkout {target}", hint="write the log outside the tree (verify counts any file in it as an edit)")


class RunOutput:
    """The on_line of launchers.run for a training run (lines come from two reader threads)."""

    def __init__(self, log: Path | None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.log_path = log
        self._log = _open_log(log) if log is not None else None
        self._streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._lock = threading.Lock()
        self._arguments: int | None = None  # lines of the argument list so far, while inside it

    def header(self, line: str) -> None:
        """A line of rocmpatch's own (what runs) for the log only; the console has it already."""
        if self._log is not None:
            self._log.write(line + "\n")
            self._log.flush()

    def __call__(self, line: str, stream: str) -> None:
        with self._lock:
            if self._log is not None:
                self._log.write(line + "\n")
                self._log.flush()
            if stream == "stdout" and self._fold(line):
                return
            self._streams[stream].write(line + "\n")
            self._streams[stream].flush()

    def _fold(self, line: str) -> bool:
        """True for a line of the argument list, which the console shows as one line at its end."""
        if self._arguments is None:
            if not ARGUMENTS_START.match(line.strip()):
                return False
            self._arguments = 0
            return True
        if not ARGUMENTS_END.match(line.strip()):
            self._arguments += 1
            return True
        where = f"in {self.log_path}" if self.log_path is not None else "not shown; --log FILE keeps every line"
        self._streams["stdout"].write(f"Megatron's arguments: {self._arguments} lines ({where})\n")
        self._arguments = None
        return True

    def close(self) -> None:
        if self._log is not None:
            self._log.close()


def _open_log(path: Path) -> TextIO:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("a", encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--log {path}: cannot write it ({error.strerror})", hint="give a file in a directory you can write to") from None
