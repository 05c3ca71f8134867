"""Finding and loading a release's patch series together with its lock entry.

Layout: patchsets/<release>/ holds each release's series.yaml, patch files and release.yaml;
upstream.lock beside patchsets/ holds one entry per release. Where patchsets/ lives:
- `--series-dir DIR` (or ROCMPATCH_SERIES_DIR): DIR is patchsets/ (one folder per release) or one
  release's folder in it; the lock is upstream.lock beside patchsets/.
- running from a source checkout (or an editable install): <checkout>/patchsets.
- an installed wheel: the copies bundled as package data in rocmpatch/_bundled/ (same layout).
Which release a command works on is chosen in rocmpatch.releases.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput
from rocmpatch.files import MAX_PATCH_FILE, read_regular_file
from rocmpatch.patching import Patch, parse_patch
from rocmpatch.schema import (LOCK_FILE, SERIES_FILE, Lock, LockedPatch, LockFile, Series, SeriesEntry,
                              load_lock_file, load_series)

SERIES_DIR_VARIABLE = "ROCMPATCH_SERIES_DIR"
PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"
LOCK_HINT = "run 'rocmpatch lock' after changing the series, and commit upstream.lock"


@dataclass(frozen=True)
class Location:
    """One release's series folder and the lock file that pins it."""

    series_dir: Path
    lock_path: Path

    @property
    def release(self) -> str:
        return self.series_dir.name

    @property
    def patchsets(self) -> "Patchsets":
        return Patchsets(self.series_dir.parent, self.lock_path)


@dataclass(frozen=True)
class Patchsets:
    """patchsets/ (one folder per release) and the upstream.lock beside it."""

    root: Path
    lock_path: Path

    def releases(self) -> list[str]:
        """The release folders (those holding a series.yaml), by name."""
        try:
            return sorted(p.name for p in self.root.iterdir() if (p / SERIES_FILE).is_file())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def location(self, release: str) -> Location:
        return Location(self.root / release, self.lock_path)

    def lock_file(self) -> LockFile | None:
        """upstream.lock, or None when it does not exist yet."""
        return load_lock_file(self.lock_path) if self.lock_path.exists() else None


def find_patchsets(series_dir: Path | None = None) -> tuple[Patchsets, str | None]:
    """patchsets/ and, when DIR names one release's folder, that release."""
    chosen = series_dir or (Path(os.environ[SERIES_DIR_VARIABLE]) if os.environ.get(SERIES_DIR_VARIABLE) else None)
    if chosen is None:
        chosen = default_patchsets_dir()
    chosen = chosen.expanduser().absolute()
    if (chosen / SERIES_FILE).is_file():
        return Patchsets(chosen.parent, chosen.parent.parent / LOCK_FILE), chosen.name
    return Patchsets(chosen, chosen.parent / LOCK_FILE), None


def default_patchsets_dir() -> Path:
    source_tree = PACKAGE_DIR.parent / "patchsets"
    if source_tree.is_dir() or not (BUNDLED_DIR / "patchsets").is_dir():
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
            if not self.location.lock_path.exists():
                return [f"{self.location.lock_path}: file not found ({LOCK_HINT})"]
            return [f"{self.location.lock_path}: has no entry for release {self.location.release!r} "
                    f"(run 'rocmpatch lock --release {self.location.release} --url URL --ref TAG --commit <40-hex id>' once)"]
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
            raise InvalidInput(where, problem, hint=None if "rocmpatch lock" in problem else LOCK_HINT)
        assert self.lock is not None
        return self.lock

    def require_lock(self) -> Lock:
        """The lock as it is, even when stale (it still names the pin); InvalidInput when there is none."""
        return self.lock or self.locked()

    def locked_patches(self) -> tuple[LockedPatch, ...]:
        return tuple(LockedPatch(p.name, p.entry.file, p.sha256) for p in self.patches)


def load(location: Location, *, require_lock: bool = True) -> LoadedSeries:
    """series.yaml, every patch file (parsed) and the release's lock entry; schema errors raise InvalidInput."""
    series = load_series(location.series_dir)
    patches = tuple(_load_patch(series, entry) for entry in series.entries)
    lock = None
    if require_lock or location.lock_path.exists():
        lock = load_lock_file(location.lock_path).releases.get(location.release)
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
