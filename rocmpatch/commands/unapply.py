from __future__ import annotations

from pathlib import Path

from rocmpatch.operations import unapplying
from rocmpatch.commands import load_selected, recovered_line
from rocmpatch.console import out
from rocmpatch.errors import ExitCode


def run(*, target: Path, series_dir: Path | None, force: bool, release: str | None = None, overlay: Path | None = None) -> ExitCode:
    loaded = load_selected(series_dir, release, overlay, target=target)
    result = unapplying.unapply(loaded, target, force=force)
    if result.recovered:
        out.print(recovered_line(result.recovered), markup=False)
    if result.abandoned:
        out.print(f"rolled back the interrupted '{result.abandoned}' (its changes and your edits are in the saved patch)", markup=False)
    for commit in result.saved_commits:
        out.print(f"saved your commit {commit[:12]} (it stays in git's reflog too)", markup=False)
    if result.saved_edits:  # where they were saved is said once, on stderr, as soon as they were (a kill after it loses nothing)
        out.print(f"to bring them back on the patched tree: rocmpatch apply --target {target} && git -C {target} apply {result.saved_edits}", markup=False)
    for path in result.kept:
        out.print(f"kept the nested git repository {path} (not in the saved patch; it is still untracked here)", markup=False)
    for name in result.removed:
        out.print(f"  removed  {name}", markup=False)
    out.print(f"{target}: at the pristine pinned commit" + ("" if result.removed else " (nothing was applied)"), markup=False)
    return ExitCode.OK
