"""One module per command: each `run(...)` takes paths and values and returns an ExitCode."""

from __future__ import annotations

from pathlib import Path

from rocmpatch.console import note
from rocmpatch.releases import choose
from rocmpatch.series import Location


def selected(series_dir: Path | None, release: str | None, *, target: Path | None = None) -> Location:
    """The release this command works on; says which on stderr when the user did not name it."""
    choice = choose(series_dir, release, target=target)
    described = choice.describe()
    if described:
        note(described)
    return choice.location


def recovered_line(recovered) -> str:
    """What apply / unapply did first about an interrupted move (a moves.Recovered)."""
    if recovered.rolled_back:
        return f"rolled back the interrupted '{recovered.operation}' first (git could not finish it: {recovered.rolled_back})"
    return f"finished the interrupted '{recovered.operation}' first"
