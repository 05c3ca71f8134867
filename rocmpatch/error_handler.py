"""Turn every way a command can end into an exit code.

A RocmpatchError is something the user can fix: one line (and its hint) on stderr, and the
error's documented exit code. Ctrl-C is 130. Anything else is a bug in rocmpatch: the
traceback goes to a log file so the terminal shows one line saying where it is.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Iterator

from rocmpatch import __version__
from rocmpatch.errors import ExitCode, RocmpatchError


def log_dir() -> Path:
    from rocmpatch.store import log_dir  # late: keep `--help` light

    return log_dir()


def write_crash_log(exc: BaseException) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (
        f"rocmpatch {__version__}, python {sys.version.split()[0]}\n"
        f"argv: {sys.argv}\n\n" + "".join(traceback.format_exception(exc))
    )
    for directory in (log_dir(), Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(prefix=f"rocmpatch-crash-{stamp}-", suffix=".log", dir=directory)
            with os.fdopen(handle, "w", encoding="utf-8") as log:
                log.write(text)
            return Path(name)
        except OSError:
            continue
    raise OSError("no writable directory for the crash log")


NO_SPACE = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large (the file size limit, ulimit -f)"}


def as_user_error(exc: BaseException) -> BaseException:
    """Failures of the machine rather than of rocmpatch, as the error the user can act on: a path
    we may not write or read, a full disk. (A missing git, or a git that found the disk full, is
    already one: rocmpatch.gitcmd raises EnvironmentProblem.)"""
    from rocmpatch.errors import NO_SPACE_HINT, EnvironmentProblem

    if not isinstance(exc, OSError):
        return exc
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and exc.filename:
        what = "not writable: read-only file system" if exc.errno == errno.EROFS else "permission denied"
        return EnvironmentProblem(f"{exc.filename}: {what}",
                                  hint="rocmpatch writes its cache under $ROCMPATCH_CACHE_DIR (else $XDG_CACHE_HOME or ~/.cache) and the target; make that path writable or point the variable elsewhere")
    if exc.errno in NO_SPACE:
        where = f"{exc.filename}: " if exc.filename else ""
        return EnvironmentProblem(f"{where}cannot write: {NO_SPACE[exc.errno]}", hint=NO_SPACE_HINT)
    if exc.errno == errno.ENAMETOOLONG and exc.filename:
        return EnvironmentProblem(f"{_shortened(os.fsdecode(exc.filename))}: file name too long for this system",
                                  hint="use shorter paths (--target, ROCMPATCH_CACHE_DIR, TMPDIR)")
    return exc


def _shortened(text: str, keep: int = 120) -> str:
    """A path short enough for one line: its start and end."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}...{text[-keep:]}"


def report(exc: BaseException) -> ExitCode:
    """Print what the user needs to know about `exc`; return the exit code for it."""
    from rocmpatch.console import err

    exc = as_user_error(exc)
    if isinstance(exc, RocmpatchError):
        err.print(f"rocmpatch: error: {exc.message}", markup=False)
        if exc.hint:
            err.print(f"  hint: {exc.hint}", markup=False)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        err.print("rocmpatch: interrupted", markup=False)
        return ExitCode.INTERRUPTED
    try:
        where = f"the traceback is in {write_crash_log(exc)}"
    except OSError:
        where = "the traceback follows:\n" + "".join(traceback.format_exception(exc))
    err.print(f"rocmpatch: internal error: {type(exc).__name__}: {exc}; {where}", markup=False)
    err.print("  hint: this is a bug in rocmpatch; please report it with that log", markup=False)
    return ExitCode.INTERNAL


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Run a command body; turn whatever ends it into SystemExit(exit code). The code is the
    command's answer as soon as it is decided (rocmpatch.interrupts): a Ctrl-C while the error
    line is printed changes nothing."""
    from rocmpatch import interrupts

    interrupts.reset()
    try:
        yield
    except (SystemExit, BrokenPipeError):
        raise  # a closed pipe (`rocmpatch ... | head`): Click exits 1 quietly, as any Click program does
    except KeyboardInterrupt:
        if interrupts.done() is None:
            interrupts.answered(ExitCode.INTERRUPTED)
            raise SystemExit(int(report(KeyboardInterrupt()))) from None
        interrupts.answered(ExitCode.OK)
        from rocmpatch.console import err

        err.print(f"rocmpatch: interrupted after the work was done: {interrupts.done()}", markup=False)
        raise SystemExit(int(ExitCode.OK)) from None
    except BaseException as exc:  # noqa: BLE001  (the point of this module)
        converted = as_user_error(exc)
        interrupts.answered(converted.exit_code if isinstance(converted, RocmpatchError) else ExitCode.INTERNAL)
        raise SystemExit(int(report(exc))) from None
    finally:
        interrupts.mark_done(None)
