"""The two consoles: results on stdout, messages and progress on stderr (Rich, made on first use).

Both write to whatever sys.stdout / sys.stderr are at the moment of writing, so tests that
capture those (CliRunner, capsys) see everything. Output that is not a terminal (a pipe, a log, CI)
is never cut: Rich would take 80 columns there and shorten patch names and paths with an ellipsis,
so tables get as many columns as their widest row needs (COLUMNS, when set, still wins).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


class LazyConsole:
    """A Rich Console made on first use of anything but plain text: `print(text, markup=False)`
    writes the text and a newline, which is what Rich would write for it (highlighting off,
    no wrapping), without importing Rich, ~40 ms of a command that must answer in 0.3 s.
    Use `.rich` where a Console object is needed (Progress, Live)."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console = None

    @property
    def rich(self):
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            uncut = not _is_terminal(stream) and not os.environ.get("COLUMNS")
            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True, emoji=False,
                                    width=UNCUT_WIDTH if uncut else None)
        return self._console

    def print(self, *objects: Any, markup: bool | None = None, **options: Any) -> None:
        if markup is False and not options and all(isinstance(o, str) for o in objects):
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(" ".join(objects) + "\n")
            stream.flush()
            return
        self.rich.print(*objects, markup=markup, **options)


def tolerate_any_encoding() -> None:
    """A path the terminal's encoding cannot show (LANG=C, PYTHONIOENCODING=ascii, or a name that
    is not UTF-8) is printed with backslash escapes (\\xfc) instead of ending the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass  # not a text file of ours (a test's capture): it keeps its own policy


# Wider than any row rocmpatch prints; a table without expand=True is only as wide as its content.
UNCUT_WIDTH = 100_000


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def is_terminal() -> bool:
    """Whether people watch stderr live (progress lines then redraw in place)."""
    return _is_terminal(sys.stderr)


out = LazyConsole()
err = LazyConsole(stderr=True)


def emit_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout, keys in a stable order."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A progress message for people, on stderr so it never mixes with results or JSON."""
    err.print(message, markup=False)
