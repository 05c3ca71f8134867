from __future__ import annotations

from pathlib import Path

from rocmpatch import series, series_page
from rocmpatch.commands import selected
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.operations import locking
from rocmpatch.releases import every


def run(*, check: bool, upstream_url: str | None, series_dir: Path | None, url: str | None, ref: str | None,
        commit: str | None, release: str | None = None, overlay: Path | None = None) -> ExitCode:
    """Every release's entry (or --release's); a re-pin (--url/--ref/--commit) names one release.
    First each patch file's header and the release's docs page are written from series.yaml.
    With --overlay: only the overlay's lock (and its patch headers), for its release (or
    --release's: a move)."""
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
        hint = f"run 'rocmpatch lock --release {location.release}'"
        page = series_page.page_path(location.patchsets.root, location.release)
        where = f"{location.lock_path} [{location.release}]"
        if check:
            problems = locking.header_problems(loaded.series, loaded.release_patches, hint)
            differs_at = series_page.refresh(page, loaded.series, write=False)
            if differs_at:
                problems.append(f"{page}:{differs_at}: is not what {location.series_dir / 'series.yaml'} gives ({hint})")
            fresh = locking.compute(loaded, pin, url_override=upstream_url)
            stale = locking.stale_fields(loaded.lock, fresh)
            for problem in problems:
                out.print(problem, markup=False)
            stale_any = stale_any or bool(stale) or bool(problems)
            message = f"is stale: {', '.join(stale)} differ ({hint})" if stale else "is up to date"
            out.print(f"{where} {message}", markup=False)
            continue
        written = locking.with_release_headers(loaded)
        fresh = locking.compute(written, pin, url_override=upstream_url)  # the sha256s of the files as written
        stale = locking.stale_fields(loaded.lock, fresh)
        headers = locking.write_patch_files(loaded.release_patches, written.release_patches)
        if headers:
            out.print(f"wrote the header of {len(headers)} patch file(s) from {location.series_dir / 'series.yaml'}: "
                      f"{', '.join(p.path.name for p in headers)}", markup=False)
        if series_page.refresh(page, loaded.series, write=True):
            out.print(f"wrote {page} from {location.series_dir / 'series.yaml'}", markup=False)
        if not stale:
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
    hint = f"run 'rocmpatch lock --overlay {overlay.directory}'"
    if check:
        problems = locking.header_problems(overlay.series, overlay.patches, hint)
        fresh = locking.compute_overlay(loaded, url_override=upstream_url)
        stale = locking.overlay_stale_fields(overlay.lock, fresh)
        for problem in problems:
            out.print(problem, markup=False)
        message = f"is stale: {', '.join(stale)} differ ({hint})" if stale else "is up to date"
        out.print(f"{overlay.lock_path} [{loaded.location.release}] {message}", markup=False)
        return ExitCode.CHECK_FAILED if stale or problems else ExitCode.OK
    written = locking.with_overlay_headers(loaded)
    assert written.overlay is not None
    fresh = locking.compute_overlay(written, url_override=upstream_url)
    stale = locking.overlay_stale_fields(overlay.lock, fresh)
    headers = locking.write_patch_files(overlay.patches, written.overlay.patches)
    if headers:
        out.print(f"wrote the header of {len(headers)} patch file(s) from {overlay.directory / 'series.yaml'}: "
                  f"{', '.join(p.path.name for p in headers)}", markup=False)
    if not stale:
        out.print(f"{overlay.lock_path} [{loaded.location.release}] is already up to date", markup=False)
    else:
        locking.write_overlay(overlay, fresh)
        out.print(f"wrote {overlay.lock_path} [{loaded.location.release}] (changed: {', '.join(stale)}); patched tree {fresh.patched_tree}", markup=False)
    return ExitCode.OK
