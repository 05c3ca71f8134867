from __future__ import annotations

from pathlib import Path

from rocmpatch import series
from rocmpatch.operations import locking
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.releases import every


def run(*, check: bool, upstream_url: str | None, series_dir: Path | None, url: str | None, ref: str | None,
        commit: str | None, release: str | None = None) -> ExitCode:
    """Every release's entry (or --release's); a re-pin (--url/--ref/--commit) names one release."""
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
