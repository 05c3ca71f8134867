"""torchrun for the collectives and train stages: one worker per selected GPU (two on CPU), built by
rocmpatch.launchers (the one torchrun builder) with this interpreter's torch.

`--standalone` lets the rendezvous pick a free local port, so concurrent smoke runs never collide.
torchrun puts each worker in its own session; workers call die_with_parent() so that a torchrun
killed outright (timeout, Ctrl-C after the grace period) never leaves them running.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from rocmpatch import launchers
from rocmpatch.smoke.supervise import ChildOutcome, run_child


def torchrun(nproc: int, module: str, args: list[str], timeout: float, cwd: Path,
             env: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None) -> ChildOutcome:
    """torchrun -m module args; each line it prints goes to on_line as it comes."""
    launch = launchers.torchrun(["-m", module, *args], nproc=nproc, launcher=launchers.THIS_PYTHON)
    return run_child(launch.vector(), dict(env if env is not None else os.environ), timeout, cwd, on_line=on_line)


def launcher_timeout(config: dict) -> float:
    """Leave the launcher time to report before the runner's own timeout stops it."""
    total = float(config.get("timeout") or 300)
    return max(total - min(15.0, total * 0.2), 1.0)
