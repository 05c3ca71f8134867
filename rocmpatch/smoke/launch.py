"""torchrun for the collectives and train stages: one worker per selected GPU (two on CPU).

`--standalone` lets the rendezvous pick a free local port, so concurrent smoke runs never collide.
torchrun puts each worker in its own session; workers call die_with_parent() so that a torchrun
killed outright (timeout, Ctrl-C after the grace period) never leaves them running.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

from rocmpatch.smoke.runner import ChildOutcome, run_child

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: get SIGKILL when the parent (torchrun) dies. A no-op elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


def torchrun(nproc: int, module: str, args: list[str], timeout: float, cwd: Path,
             env: dict[str, str] | None = None) -> ChildOutcome:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *args]
    return run_child(argv, dict(env if env is not None else os.environ), timeout, cwd)


def launcher_timeout(config: dict) -> float:
    """Leave the launcher time to report before the runner's own timeout stops it."""
    total = float(config.get("timeout") or 300)
    return max(total - min(15.0, total * 0.2), 1.0)
