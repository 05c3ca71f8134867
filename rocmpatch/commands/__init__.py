"""One module per command: each `run(...)` takes paths and values and returns an ExitCode."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rocmpatch import series
from rocmpatch.console import note
from rocmpatch.releases import choose
from rocmpatch.series import OVERLAY, LoadedOverlay, LoadedSeries, Location

if TYPE_CHECKING:
    from rocmpatch.operations.verifying import Difference

LISTED = 20  # paths verify lists in text; more (a foreign checkout: thousands) are counted, --json has them all


def selected(series_dir: Path | None, release: str | None, *, target: Path | None = None,
             overlay: LoadedOverlay | None = None) -> Location:
    """The release this command works on; says which on stderr when the user did not name it."""
    locked_for = (overlay.lock.release, overlay.lock_path) if overlay is not None and overlay.lock is not None else None
    choice = choose(series_dir, release, target=target, overlay=locked_for)
    described = choice.describe()
    if described:
        note(described)
    return choice.location


def load_selected(series_dir: Path | None, release: str | None, overlay_dir: Path | None, *, target: Path | None = None) -> LoadedSeries:
    """The release this command works on, loaded, with the overlay (--overlay DIR) stacked on it."""
    overlay = series.load_overlay(overlay_dir) if overlay_dir is not None else None
    location = selected(series_dir, release, target=target, overlay=overlay)
    return series.load(location, overlay=overlay)


def patch_label(name: str, layer: str) -> str:
    """A patch's name as the listings print it: an overlay's patch is marked as one."""
    return f"{name} (overlay)" if layer == OVERLAY else name


def recovered_line(recovered) -> str:
    """What apply / unapply did first about an interrupted move (a moves.Recovered)."""
    if recovered.rolled_back:
        return f"rolled back the interrupted '{recovered.operation}' first (git could not finish it: {recovered.rolled_back})"
    return f"finished the interrupted '{recovered.operation}' first"


def difference_line(difference: Difference) -> str:
    """One path that differs, its kind and the patches touching it (verify and verify --installed)."""
    by = f"  ({', '.join(difference.patches)})" if difference.patches else ""
    detail = f": {difference.detail}" if difference.detail else ""
    return f"{difference.kind:<14} {difference.path}{by}{detail}"
