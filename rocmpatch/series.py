"""Finding and loading the patch series together with its lock.

Where the series lives:
- `--series-dir DIR` (or ROCMPATCH_SERIES_DIR): DIR holds series.yaml and the patch files; the
  lock is DIR/../upstream.lock (next to DIR, as patchsets/ and upstream.lock sit in the repo).
- running from a source checkout (or an editable install): <checkout>/patchsets and
  <checkout>/upstream.lock.
- an installed wheel: the copies bundled as package data in rocmpatch/_bundled/ (same layout).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput
from rocmpatch.files import MAX_PATCH_FILE, read_regular_file
from rocmpatch.patching import Patch, parse_patch
from rocmpatch.schema import LOCK_FILE, SERIES_FILE, Lock, LockedPatch, Series, SeriesEntry, load_lock, load_series

SERIES_DIR_VARIABLE = "ROCMPATCH_SERIES_DIR"
PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"
LOCK_HINT = "run 'rocmpatch lock' after changing the series, and commit upstream.lock"


@dataclass(frozen=True)
class Location:
    series_dir: Path
    lock_path: Path


def locate(series_dir: Path | None = None) -> Location:
    chosen = series_dir or (Path(os.environ[SERIES_DIR_VARIABLE]) if os.environ.get(SERIES_DIR_VARIABLE) else None)
    if chosen is None:
        chosen = default_series_dir()
    chosen = chosen.expanduser().absolute()
    return Location(chosen, chosen.parent / LOCK_FILE)


def default_series_dir() -> Path:
    source_tree = PACKAGE_DIR.parent / "patchsets"
    if (source_tree / SERIES_FILE).is_file() or not (BUNDLED_DIR / "patchsets").is_dir():
        return source_tree
    return BUNDLED_DIR / "patchsets"


@dataclass(frozen=True)
class LoadedPatch:
    entry: SeriesEntry
    patch: Patch
    sha256: str
    path: Path
    text: str  # the file's content (utf-8, surrogateescape), kept so no one reads it again

    @property
    def name(self) -> str:
        return self.entry.name


@dataclass(frozen=True)
class LoadedSeries:
    location: Location
    series: Series
    patches: tuple[LoadedPatch, ...]
    lock: Lock | None  # None when upstream.lock does not exist yet

    def lock_problems(self) -> list[str]:
        """Each way the lock disagrees with series.yaml and the patch files, as one line."""
        if self.lock is None:
            return [f"{self.location.lock_path}: file not found ({LOCK_HINT})"]
        problems = []
        locked = {p.name: p for p in self.lock.patches}
        for loaded in self.patches:
            entry = locked.get(loaded.name)
            if entry is None:
                problems.append(f"{loaded.path}: patch {loaded.name!r} is in series.yaml but not in {self.location.lock_path}")
            elif entry.file != loaded.entry.file:
                problems.append(f"{self.location.lock_path}: patch {loaded.name!r} names file {entry.file!r}, series.yaml says {loaded.entry.file!r}")
            elif entry.sha256 != loaded.sha256:
                problems.append(f"{loaded.path}: sha256 {loaded.sha256[:12]}… differs from {self.location.lock_path} ({entry.sha256[:12]}…)")
        names = [p.name for p in self.patches]
        for entry in self.lock.patches:
            if entry.name not in names:
                problems.append(f"{self.location.lock_path}: patch {entry.name!r} is not in series.yaml")
        if not problems and [p.name for p in self.lock.patches] != names:
            problems.append(f"{self.location.lock_path}: patch order differs from series.yaml")
        return problems

    def locked(self) -> Lock:
        """The lock, refusing any disagreement with the patch files (InvalidInput)."""
        problems = self.lock_problems()
        if problems:
            where, _, problem = problems[0].partition(": ")
            raise InvalidInput(where, problem, hint=LOCK_HINT)
        assert self.lock is not None
        return self.lock

    def require_lock(self) -> Lock:
        """The lock as it is, even when stale (it still names the pin); InvalidInput when there is none."""
        return self.lock or self.locked()

    def locked_patches(self) -> tuple[LockedPatch, ...]:
        return tuple(LockedPatch(p.name, p.entry.file, p.sha256) for p in self.patches)


def load(location: Location, *, require_lock: bool = True) -> LoadedSeries:
    """series.yaml, every patch file (parsed) and upstream.lock; schema errors raise InvalidInput."""
    series = load_series(location.series_dir)
    patches = tuple(_load_patch(series, entry) for entry in series.entries)
    lock = None
    if require_lock or location.lock_path.exists():
        lock = load_lock(location.lock_path)
    return LoadedSeries(location, series, patches, lock)


def _load_patch(series: Series, entry: SeriesEntry) -> LoadedPatch:
    path = series.patch_path(entry)
    if not path.exists() and not path.is_symlink():
        raise InvalidInput(path, f"patch file of {entry.name!r} not found", hint="series.yaml names it; add the file or fix series[].file")
    # bytes, never text mode (it would eat \r); a regular file only (a FIFO would hang us)
    data = read_regular_file(path, limit=MAX_PATCH_FILE, what="patch file")
    return loaded_patch(entry, data, path)


def loaded_patch(entry: SeriesEntry, data: bytes, path: Path) -> LoadedPatch:
    """A patch file's bytes parsed and hashed (the sha256 the lock records is of these bytes)."""
    text = data.decode("utf-8", "surrogateescape")
    patch = parse_patch(text, name=entry.name, source=str(path))
    return LoadedPatch(entry, patch, hashlib.sha256(data).hexdigest(), path, text)
