"""Children that do not outlive rocmpatch, and the points where tests stop it.

A git that writes a working tree or fetches, left running after rocmpatch is killed (kill -9 of
rocmpatch alone leaves its children to init), goes on writing: into a half-built new target beside
the real one, or a cache entry. On Linux the kernel can signal a child when its parent dies
(PR_SET_PDEATHSIG); elsewhere this is a no-op.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
_prctl = None


def _load_prctl():
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        import ctypes

        try:
            _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when its parent dies (Linux; a no-op elsewhere)."""
    prctl = _load_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig))


def dying_with_us(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A subprocess preexec_fn: the child gets `sig` when this process dies, even by SIGKILL
    (git removes its lock files on SIGTERM, then exits). None where the kernel cannot do it.

    A preexec_fn makes subprocess fork instead of spawning (about a millisecond more per child,
    more on a loaded machine), so only the long-running, writing children get it."""
    prctl = _load_prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before the request was made
            os.kill(os.getpid(), sig)

    return preexec


INTERRUPT_VARIABLE = "ROCMPATCH_TEST_INTERRUPT_AT"  # tests: send ourselves SIGINT at a named point
SIGNAL_VARIABLE = "ROCMPATCH_TEST_SIGNAL"  # tests: which signal (INT, KILL); INT unless set
ANNOUNCE_VARIABLE = "ROCMPATCH_TEST_ANNOUNCE"  # tests: say "rocmpatch-test: at NAME" on stderr at each point


def interruption_point(name: str) -> None:
    """A no-op unless a test asked to be interrupted here (a real SIGINT, as from Ctrl-C, or the
    signal ROCMPATCH_TEST_SIGNAL names), or to be told when we get here (to kill us a moment later)."""
    if os.environ.get(ANNOUNCE_VARIABLE):
        os.write(2, f"rocmpatch-test: at {name}\n".encode())
    if os.environ.get(INTERRUPT_VARIABLE) == name:
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get(SIGNAL_VARIABLE, "INT")))
