from __future__ import annotations

from pathlib import Path

from rocmpatch import series
from rocmpatch.commands import selected
from rocmpatch.operations import locking
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.releases import every


def run(*, check: bool, upstream_url: str | None, series_dir: Path | None, url: str | None, ref: str | None,
        commit: str | None, release: str | None = None, overlay: Path | None = None) -> ExitCode:
    """Every release's entry (or --release's); a re-pin (--url/--ref/--commit) names one release.
    With --overlay: only the overlay's lock, for its release (or --release's: a move)."""
    if overlay is not None:
        if url or ref or commit:
            raise UsageError("--url/--ref/--commit re-pin a release; an overlay follows its release's pin", hint="drop them, or lock the release without --overlay")
        return _lock_overlay(check, upstream_url, series_dir, release, overlay)
    locations = every(series_dir, release)
    pin = locking.Pin(url, ref, commit)
    if (url or ref or commit) and len(locations) != 1:
        raise UsageError("--url/--ref/--commit re-pin one release", hint="add --release NAME")
    stale_any = False
    for location in locations:
        loaded = series.load(location, require_lock=False)
        fresh = locking.compute(loaded, pin, url_override=upstream_url)
        stale = locking.stale_fields(loaded.lock, fresh)
        where = f"{location.lock_path} [{location.release}]"
        if check:
            stale_any = stale_any or bool(stale)
            message = f"is stale: {', '.join(stale)} differ (run 'rocmpatch lock --release {location.release}')" if stale else "is up to date"
            out.print(f"{where} {message}", markup=False)
        elif not stale:
            out.print(f"{where} is already up to date", markup=False)
        else:
            locking.write(location, fresh)
            out.print(f"wrote {where} (changed: {', '.join(stale)}); patched tree {fresh.patched_tree}", markup=False)
    return ExitCode.CHECK_FAILED if stale_any else ExitCode.OK


def _lock_overlay(check: bool, upstream_url: str | None, series_dir: Path | None, release: str | None, directory: Path) -> ExitCode:
    """DIR/overlay.lock from DIR's series on top of the release's; --release moves the overlay to
    another release (its patches must apply there exactly)."""
    overlay = series.load_overlay(directory)
    locked_for = overlay if release is None else None  # --release: the overlay is being moved there
    loaded = series.load(selected(series_dir, release, overlay=locked_for), overlay=overlay)
    fresh = locking.compute_overlay(loaded, url_override=upstream_url)
    stale = locking.overlay_stale_fields(overlay.lock, fresh)
    if check:
        message = f"is stale: {', '.join(stale)} differ (run 'rocmpatch lock --overlay {overlay.directory}')" if stale else "is up to date"
        out.print(f"{overlay.lock_path} [{loaded.location.release}] {message}", markup=False)
        return ExitCode.CHECK_FAILED if stale else ExitCode.OK
    if not stale:
        out.print(f"{overlay.lock_path} [{loaded.location.release}] is already up to date", markup=False)
    else:
        locking.write_overlay(overlay, fresh)
        out.print(f"wrote {overlay.lock_path} [{loaded.location.release}] (changed: {', '.join(stale)}); patched tree {fresh.patched_tree}", markup=False)
    return ExitCode.OK
