"""The two Rich consoles: results on stdout, messages and progress on stderr.

Both write to whatever sys.stdout / sys.stderr are at the moment of writing, so tests that
capture those (CliRunner, capsys) see everything.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout, keys in a stable order."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A progress message for people, on stderr so it never mixes with results or JSON."""
    err.print(message, markup=False)
