from __future__ import annotations

from pathlib import Path

from rocmpatch import series, unapplying
from rocmpatch.console import out
from rocmpatch.errors import ExitCode


def run(*, target: Path, series_dir: Path | None, force: bool) -> ExitCode:
    loaded = series.load(series.locate(series_dir), require_lock=True)
    result = unapplying.unapply(loaded, target, force=force)
    if result.recovered:
        out.print(f"finished the interrupted '{result.recovered}' first", markup=False)
    if result.saved_edits:
        out.print(f"saved your uncommitted edits to {result.saved_edits} (restore with: git -C {target} apply {result.saved_edits})", markup=False)
    for name in result.removed:
        out.print(f"  removed  {name}", markup=False)
    out.print(f"{target}: at the pristine pinned commit" + ("" if result.removed else " (nothing was applied)"), markup=False)
    return ExitCode.OK
