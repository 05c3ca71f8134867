from __future__ import annotations

from pathlib import Path

from rocmpatch import locking, series
from rocmpatch.console import out
from rocmpatch.errors import ExitCode


def run(*, check: bool, upstream_url: str | None, series_dir: Path | None, url: str | None, ref: str | None, commit: str | None) -> ExitCode:
    location = series.locate(series_dir)
    loaded = series.load(location, require_lock=False)
    fresh = locking.compute(loaded, locking.Pin(url, ref, commit), url_override=upstream_url)
    stale = locking.stale_fields(loaded.lock, fresh)
    if check:
        if stale:
            out.print(f"{location.lock_path} is stale: {', '.join(stale)} differ (run 'rocmpatch lock')", markup=False)
            return ExitCode.CHECK_FAILED
        out.print(f"{location.lock_path} is up to date", markup=False)
        return ExitCode.OK
    if not stale:
        out.print(f"{location.lock_path} is already up to date", markup=False)
        return ExitCode.OK
    location.lock_path.write_text(fresh.to_yaml(), encoding="utf-8")
    out.print(f"wrote {location.lock_path} ({', '.join(stale)} changed); patched tree {fresh.patched_tree}", markup=False)
    return ExitCode.OK
