"""`rocmpatch cache [show|prune]`: what the cache holds, and removing what no release here needs
(operations/caching)."""

from __future__ import annotations

from pathlib import Path

from rocmpatch import store
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.operations import caching


def human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def show(*, series_dir: Path | None, as_json: bool) -> ExitCode:
    found = caching.entries(series_dir)
    total = sum(entry.bytes for entry in found)
    if as_json:
        emit_json({"cache": str(store.cache_dir()), "bytes": total, "entries": [entry.to_json() for entry in found]})
        return ExitCode.OK
    out.print(f"{store.cache_dir()}: {human(total)} in {len(found)} entr{'y' if len(found) == 1 else 'ies'} (set {store.CACHE_DIR_VARIABLE} to move it)", markup=False)
    for entry in found:
        mark = "" if entry.needed else "  [prune removes it]" if entry.kind != caching.HISTORY else "  [prune --history removes it]"
        out.print(f"  {entry.kind:<10} {human(entry.bytes):>10}  {entry.path.name}  {entry.what}{mark}", markup=False)
    if not found:
        out.print("  (empty: the first apply, check or fetch fills it)", markup=False)
    return ExitCode.OK


def prune(*, series_dir: Path | None, everything: bool, history: bool, dry_run: bool, as_json: bool) -> ExitCode:
    result = caching.prune(series_dir, everything=everything, history=history, dry_run=dry_run)
    freed = sum(entry.bytes for entry in result.removed)
    if as_json:
        emit_json({"dry_run": dry_run, "bytes": freed, "removed": [e.to_json() for e in result.removed],
                   "busy": [e.to_json() for e in result.busy], "kept": [e.to_json() for e in result.kept]})
        return ExitCode.BUSY if result.busy else ExitCode.OK
    verb = "would remove" if dry_run else "removed"
    for entry in result.removed:
        out.print(f"{verb} {entry.kind:<10} {human(entry.bytes):>10}  {entry.path}  {entry.what}", markup=False)
    for entry in result.busy:
        out.print(f"in use, kept  {entry.path}: another rocmpatch process holds its lock; rerun when it is done", markup=False)
    out.print(f"{verb} {len(result.removed)} entr{'y' if len(result.removed) == 1 else 'ies'}, {human(freed)}; kept {len(result.kept)} "
              "(each is fetched again when a command needs it)", markup=False)
    return ExitCode.BUSY if result.busy else ExitCode.OK
