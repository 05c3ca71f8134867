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
