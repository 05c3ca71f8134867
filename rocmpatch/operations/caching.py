"""`rocmpatch cache`: what the cache directory holds, and pruning it.

The cache (rocmpatch.store.cache_dir) holds, per kind:
- `commits/<commit>.git`: one pinned upstream commit (a shallow fetch, a few MB) and the series heads
  made on it; needed by apply, check, lock and verify of the releases pinning it, fetched again
  when missing;
- `history/<hash>.git`: the full history of an upstream URL, for drift and rebase (hundreds of MB);
- `worktrees/`: verify's stat cache of targets (bounded: the oldest beyond 64 go by themselves);
- `logs/`: crash logs (a traceback per internal error);
- leftovers: `*.partial` entries a killed fetch left, `*.removing` ones a killed prune left.
Everything in it can be made again; nothing of a user's is there. Prune removes by default what
no release here needs (a pin no release's lock names, leftovers, logs older than LOG_DAYS), with
`everything` the whole cache. An entry is removed only while holding its lock (one in use by
another process is skipped, said so), and removal is a rename out of the way first, so a
half-deleted entry is never taken for a complete one.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import series, store
from rocmpatch.errors import Busy, RocmpatchError
from rocmpatch.files import file_lock
from rocmpatch.releases import every

LOG_DAYS = 30
PIN, HISTORY, STAT, LOGS, LEFTOVER = "pin", "history", "stat-cache", "logs", "leftover"


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    bytes: int
    what: str  # for a person: the commit and the releases pinning it, ...
    needed: bool  # by a release here (pins), or kept by rule (stat cache, recent logs)
    lock: Path | None = None  # held while it is removed

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "what": self.what, "needed": self.needed}


@dataclass
class Pruned:
    removed: list[Entry] = field(default_factory=list)
    busy: list[Entry] = field(default_factory=list)
    kept: list[Entry] = field(default_factory=list)
    dry_run: bool = False


def size_of(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def pinned_commits(series_dir: Path | None) -> dict[str, list[str]]:
    """commit -> the releases whose lock pins it (every release rocmpatch finds here)."""
    pins: dict[str, list[str]] = {}
    for location in every(series_dir, None):
        try:
            lock = series.load(location).lock
        except RocmpatchError:
            continue  # a broken release folder needs nothing from the cache until it is fixed
        if lock is not None:
            pins.setdefault(lock.upstream.commit, []).append(f"{location.release} ({lock.upstream.ref})")
    return pins


def entries(series_dir: Path | None, *, now: float | None = None) -> list[Entry]:
    root = store.cache_dir()
    now = time.time() if now is None else now
    pins = pinned_commits(series_dir)
    found: list[Entry] = []
    commits = root / "commits"
    for path in sorted(commits.glob("*")) if commits.is_dir() else ():
        name = path.name
        if name.endswith(".git") and path.is_dir() and not name.startswith("."):
            commit = name[:-len(".git")]
            releases = pins.get(commit)
            what = f"{commit[:12]}: pinned by {', '.join(releases)}" if releases else f"{commit[:12]}: no release here pins it"
            found.append(Entry(PIN, path, size_of(path), what, bool(releases), path.with_suffix(".lock")))
        elif name.endswith(".partial"):
            found.append(Entry(LEFTOVER, path, size_of(path), "a fetch that did not finish", False, commits / f"{name[1:].split('.', 1)[0]}.lock"))
        elif name.endswith(".removing"):
            found.append(Entry(LEFTOVER, path, size_of(path), "an entry a prune did not finish removing", False))
    history = root / "history"
    for path in sorted(history.glob("*.git")) if history.is_dir() else ():
        found.append(Entry(HISTORY, path, size_of(path), "an upstream's full history (drift, rebase); fetched again when needed",
                           False, path.with_suffix(".lock")))
    stat = root / "worktrees"
    if stat.is_dir():
        count = sum(1 for _ in stat.iterdir())
        found.append(Entry(STAT, stat, size_of(stat), f"verify's stat cache of {count} target(s) (bounded, kept)", True))
    logs = root / "logs"
    for path in sorted(logs.glob("*")) if logs.is_dir() else ():
        recent = now - path.lstat().st_mtime < LOG_DAYS * 86400
        found.append(Entry(LOGS, path, size_of(path), "a crash log" + (" (kept: younger than 30 days)" if recent else ""), recent))
    return found


def prune(series_dir: Path | None, *, everything: bool = False, history: bool = False, dry_run: bool = False) -> Pruned:
    """Remove what is not needed (with `history`, the full histories too; with `everything`, all)."""
    result = Pruned(dry_run=dry_run)
    for entry in entries(series_dir):
        goes = everything or not entry.needed and (entry.kind != HISTORY or history)
        if not goes:
            result.kept.append(entry)
        elif dry_run:
            result.removed.append(entry)
        else:
            try:
                _remove(entry)
                result.removed.append(entry)
            except Busy:
                result.busy.append(entry)
    return result


def _remove(entry: Entry) -> None:
    if entry.lock is None:
        _delete(entry.path)
        return
    with file_lock(entry.lock, wait=0, what=f"the cache entry {entry.path}"):
        _delete(entry.path)  # the lock file stays (empty): another process may be waiting on it


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        # Renamed first: a reader never sees a half-removed entry under its real name.
        doomed = path.with_name(f".{path.name}.removing")
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
