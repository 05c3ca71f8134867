"""Ctrl-C (SIGINT) at every moment of a command gives the documented code (docs/exit-codes.md).

Until the command has its answer, a Ctrl-C is 130 and `rocmpatch: interrupted`, whether it comes
while Python loads rocmpatch, while Click reads the command line, or while the command works (a
change that is complete says so and exits 0: mark_done). Once the command has its
answer (its exit code decided, its output written), a Ctrl-C changes nothing: rocmpatch exits
with that answer's code, not with 130 after printing success, nor Click's `Aborted!` (exit 1).
Small on purpose: it is loaded before anything else (rocmpatch/__main__.py).
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

INTERRUPTED = 130  # ExitCode.INTERRUPTED, without importing rocmpatch.errors this early
_answer: int | None = None


def install() -> None:
    """Our SIGINT handler in place of Python's; a SIGINT that is ignored (a job started in the
    background) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(_signum, _frame) -> None:
    if _answer is None:
        raise KeyboardInterrupt


def answered(code: int) -> int:
    """The command's exit code is decided: from now on a Ctrl-C is ignored."""
    global _answer
    _answer = int(code)
    from rocmpatch.processes import interruption_point

    interruption_point("answered")
    return _answer


def reset() -> None:
    """A new command (tests run many in one process)."""
    global _answer, _done
    _answer = None
    _done = None


_done: str | None = None  # what the command has completed, once its change is made


def mark_done(what: str | None) -> None:
    """The command's change is complete: a Ctrl-C from now on no longer undoes or stops anything,
    so it exits 0 (saying so) instead of 130. Kept here, the lowest layer, so that operations can
    say it without importing the error handler."""
    global _done
    _done = what


def done() -> str | None:
    """What mark_done said for the running command, or None."""
    return _done


def interrupted() -> NoReturn:
    """Ctrl-C before the command had an answer: the one line, and 130."""
    answered(INTERRUPTED)
    try:
        sys.stderr.write("rocmpatch: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(INTERRUPTED)
