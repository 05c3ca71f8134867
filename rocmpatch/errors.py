"""One error base class; every error carries the exit code the CLI returns for it.

The codes are documented in docs/exit-codes.md; keep the two in step.
"""

from __future__ import annotations

import enum
from pathlib import Path


class ExitCode(enum.IntEnum):
    OK = 0
    CHECK_FAILED = 1  # a check answered "no": verify differs, lock stale, a patch breaks, a smoke stage failed
    USAGE = 2  # bad command line (raised by Click itself)
    INVALID_INPUT = 3  # lock, series or patch file malformed or unsafe
    PATCH_CONFLICT = 4  # a patch does not apply exactly; the target was left as it was
    TARGET_REFUSED = 5  # target not a git repo, at another commit, or holding user edits
    UPSTREAM_ERROR = 6  # fetch failed, bad URL, commit or tree id differs from the lock
    BUSY = 7  # another rocmpatch process holds the target's lock
    ENVIRONMENT = 8  # a required program or package is missing (git, torch)
    MOVE_FAILED = 9  # git could not finish changing a target's working tree; rolled back, or journal kept
    INTERNAL = 70  # a bug: the traceback is written to a log file
    INTERRUPTED = 130  # Ctrl-C


def shown(path: str | Path) -> str:
    """A path for one line of text: quoted when it holds a control character (a line break) or bytes
    that are not UTF-8 (surrogate escapes)."""
    text = str(path)
    return repr(text) if any(ord(char) < 32 or ord(char) == 127 or 0xDC80 <= ord(char) <= 0xDCFF for char in text) else text


NO_SPACE_HINT = "free space on that file system (or raise the quota, or `ulimit -f`), then rerun; nothing half-written is kept"


class RocmpatchError(Exception):
    """A failure the user can act on: printed as one line, mapped to `exit_code`."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class CheckFailed(RocmpatchError):
    exit_code = ExitCode.CHECK_FAILED


class UsageError(RocmpatchError):
    """Options that parse but do not fit together (Click reports the others with the same code)."""

    exit_code = ExitCode.USAGE


class InvalidInput(RocmpatchError):
    """Bad content in a file we read. `where` is 'path', 'path:line' or 'path: key'; printed on one
    line (quoted by shown(), when the path holds a line break or bytes that are not UTF-8)."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, where: str | Path, problem: str, *, hint: str | None = None) -> None:
        super().__init__(f"{shown(where)}: {problem}", hint=hint)
        self.where = str(where)


class PatchConflict(RocmpatchError):
    exit_code = ExitCode.PATCH_CONFLICT

    def __init__(
        self, patch: str, path: str, hunk: int | None, reason: str, *, hint: str | None = None
    ) -> None:
        at = f"{path}, hunk {hunk}" if hunk is not None else path
        super().__init__(f"patch {patch} does not apply: {at}: {reason}", hint=hint)
        self.patch, self.path, self.hunk, self.reason = patch, path, hunk, reason


class TargetRefused(RocmpatchError):
    exit_code = ExitCode.TARGET_REFUSED


class UpstreamError(RocmpatchError):
    exit_code = ExitCode.UPSTREAM_ERROR


class Busy(RocmpatchError):
    exit_code = ExitCode.BUSY


class EnvironmentProblem(RocmpatchError):
    exit_code = ExitCode.ENVIRONMENT


class MoveFailed(RocmpatchError):
    """The working tree was being changed when git failed (a full disk, a file it could not write):
    rolled back, or, when even that failed, left with its journal for the next command."""

    exit_code = ExitCode.MOVE_FAILED
