"""Running rocmpatch as a real child process (signals, PATH without git, concurrent runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_rocmpatch(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "rocmpatch", *args], env=full_env, capture_output=True, text=True,
                          preexec_fn=default_sigint, **kwargs)


def default_sigint() -> None:
    """Ctrl-C as a user's shell delivers it: a test suite started in the background (`cmd &` in a
    script) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
