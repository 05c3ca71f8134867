from __future__ import annotations

from pathlib import Path

from rocmpatch.operations import applying
from rocmpatch.commands import load_selected, patch_label, recovered_line
from rocmpatch.console import note, out
from rocmpatch.errors import ExitCode
from rocmpatch.series import RELEASE


def run(*, target: Path, upstream_url: str | None, series_dir: Path | None, dry_run: bool, release: str | None = None,
        overlay: Path | None = None) -> ExitCode:
    loaded = load_selected(series_dir, release, overlay, target=target)
    result = applying.apply(loaded, target, url_override=upstream_url, dry_run=dry_run)
    if result.unwritable_cache is not None:
        note(f"the cache entry {result.unwritable_cache} is not writable: the series is applied in the new target instead (slower each time)")
    if result.recovered:
        out.print(recovered_line(result.recovered), markup=False)
    verb = "would apply" if dry_run else "applied"
    if result.created:
        where = "it does not exist yet" if not result.target.exists() else "an empty directory"
        out.print(f"would create {result.target} ({where}) at the pinned commit of {loaded.location.release}" if dry_run
                  else f"created {result.target} at the pinned commit of {loaded.location.release}", markup=False)
    layers = {p.name: p.layer for p in loaded.patches}
    if not result.applied:  # one line, not one per patch
        out.print(f"{result.target}: the whole series is already applied ({_count(result.already)} of {loaded.describe()}); nothing to do", markup=False)
        return ExitCode.OK
    if result.already:
        labels = [patch_label(name, layers.get(name, RELEASE)) for name in result.already]
        span = labels[0] if len(labels) == 1 else f"{_count(labels)}: {labels[0]} ... {labels[-1]}"
        out.print(f"  already applied  {span}", markup=False)
    for name in result.applied:
        out.print(f"  {verb:<15}  {patch_label(name, layers.get(name, RELEASE))}", markup=False)
    if not dry_run:
        out.print(f"{result.target}: {len(result.applied)} patch(es) of {loaded.describe()} applied, HEAD {result.head}", markup=False)
    return ExitCode.OK


def _count(names: list[str]) -> str:
    return f"{len(names)} patch{'' if len(names) == 1 else 'es'}"
