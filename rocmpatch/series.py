"""Finding and loading a release's patch series together with its lock entry.

Layout: patchsets/<release>/ holds each release's series.yaml, patch files and release.yaml;
upstream.lock beside patchsets/ holds one entry per release. Where patchsets/ lives:
- `--series-dir DIR` (or ROCMPATCH_SERIES_DIR): DIR is patchsets/ (one folder per release) or one
  release's folder in it; the lock is upstream.lock beside patchsets/.
- running from a source checkout (or an editable install): <checkout>/patchsets.
- an installed wheel: the copies bundled as package data in rocmpatch/_bundled/ (same layout).
Which release a command works on is chosen in rocmpatch.releases.

An overlay (`--overlay DIR`, ROCMPATCH_OVERLAY) is a framework's own series on top of a release's:
DIR holds a series.yaml and patch files in the release folder's format, and overlay.lock (the
release it applies to, each patch's sha256, the tree after both). A LoadedSeries with an overlay
is one stack: `patches` are the release's, then the overlay's, applied by the same engine
(rocmpatch.trees) and committed with trailers of their own (rocmpatch.history).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput
from rocmpatch.files import MAX_PATCH_FILE, read_regular_file
from rocmpatch.patching import Patch, parse_patch
from rocmpatch.schema import (LOCK_FILE, OVERLAY_LOCK_FILE, SERIES_FILE, Lock, LockedPatch, LockFile, OverlayLock, ReleaseInfo,
                              Series, SeriesEntry, load_lock_file, load_overlay_lock, load_release_info, load_series)

SERIES_DIR_VARIABLE = "ROCMPATCH_SERIES_DIR"
OVERLAY_VARIABLE = "ROCMPATCH_OVERLAY"
RELEASE, OVERLAY = "release", "overlay"  # the two layers of a stack: the release's series, a framework's overlay
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

    @functools.cached_property
    def info(self) -> ReleaseInfo:
        """The release's release.yaml, read once for this Location (a command passes its Location on)."""
        return load_release_info(self.series_dir)


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
    layer: str = RELEASE  # RELEASE, or OVERLAY for a framework's own patch on top

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def key(self) -> tuple[str, str, str]:
        """What a commit's trailers say of the patch it carries."""
        return self.layer, self.name, self.sha256


@dataclass(frozen=True)
class LoadedOverlay:
    """A framework's own series (--overlay DIR) with its lock, applied after a release's series."""

    directory: Path
    series: Series
    patches: tuple[LoadedPatch, ...]  # layer OVERLAY
    lock: OverlayLock | None  # None when DIR/overlay.lock does not exist yet

    @property
    def lock_path(self) -> Path:
        return self.directory / OVERLAY_LOCK_FILE

    def lock_hint(self) -> str:
        return f"run 'rocmpatch lock --overlay {self.directory}' after changing the overlay, and keep overlay.lock with it"


@dataclass(frozen=True)
class LoadedSeries:
    location: Location
    series: Series
    release_patches: tuple[LoadedPatch, ...]  # the release's own series
    lock: Lock | None  # None when upstream.lock does not exist yet
    overlay: LoadedOverlay | None = None

    @property
    def patches(self) -> tuple[LoadedPatch, ...]:
        """Everything applied on the pin, in order: the release's series, then the overlay's."""
        return self.release_patches + (self.overlay.patches if self.overlay else ())

    @property
    def patched_tree(self) -> str:
        """The tree the whole stack gives on the pin, as the locks record it (the overlay's when
        there is one); InvalidInput when a lock it needs does not exist."""
        if self.overlay is None:
            return self.require_lock().patched_tree
        if self.overlay.lock is None:
            raise InvalidInput(self.overlay.lock_path, "file not found", hint=self.overlay.lock_hint())
        return self.overlay.lock.patched_tree

    def describe(self) -> str:
        """'core_v0.19.0', or 'core_v0.19.0 + the overlay DIR'."""
        release = self.location.release
        return f"{release} + the overlay {self.overlay.directory}" if self.overlay else release

    def lock_problems(self) -> list[str]:
        """Each way a lock disagrees with series.yaml and the patch files, as one line: the
        release's lock, then the overlay's."""
        return self.release_lock_problems() + self.overlay_lock_problems()

    def release_lock_problems(self) -> list[str]:
        if self.lock is None:
            if not self.location.lock_path.exists():
                return [f"{self.location.lock_path}: file not found ({LOCK_HINT})"]
            return [f"{self.location.lock_path}: has no entry for release {self.location.release!r} "
                    f"(run 'rocmpatch lock --release {self.location.release} --url URL --ref TAG --commit <40-hex id>' once)"]
        return _patch_problems(self.release_patches, self.lock.patches, self.location.lock_path)

    def overlay_lock_problems(self) -> list[str]:
        overlay = self.overlay
        if overlay is None:
            return []
        if overlay.lock is None:
            return [f"{overlay.lock_path}: file not found ({overlay.lock_hint()})"]
        release = self.location.release
        if overlay.lock.release != release:
            return [f"{overlay.lock_path}: is locked for release {overlay.lock.release}, not {release} "
                    f"(run 'rocmpatch lock --overlay {overlay.directory} --release {release}' to move it, or 'rocmpatch rebase --overlay' when it no longer applies)"]
        problems = []
        if self.lock is not None and overlay.lock.release_tree != self.lock.patched_tree:
            problems.append(f"{overlay.lock_path}: release_tree {overlay.lock.release_tree[:12]}… is not release {release}'s patched tree "
                            f"{self.lock.patched_tree[:12]}… (the release's series changed; {overlay.lock_hint()})")
        return problems + _patch_problems(overlay.patches, overlay.lock.patches, overlay.lock_path, hint=overlay.lock_hint())

    def locked(self) -> Lock:
        """The release's lock, refusing any disagreement of a lock with the patch files (InvalidInput)."""
        _refuse(self.lock_problems())
        assert self.lock is not None
        return self.lock

    def release_locked(self) -> Lock:
        """The release's lock, refusing only the release's own problems (the overlay's lock is being written)."""
        _refuse(self.release_lock_problems())
        assert self.lock is not None
        return self.lock

    def refuse_stale_overlay_lock(self) -> None:
        """InvalidInput when the overlay's lock disagrees with its patch files or with the release's
        lock, as `apply` refuses it: what the overlay's commits are checked against must be current."""
        _refuse(self.overlay_lock_problems())

    def require_lock(self) -> Lock:
        """The lock as it is, even when stale (it still names the pin); InvalidInput when there is none."""
        return self.lock or self.locked()

    def locked_patches(self) -> tuple[LockedPatch, ...]:
        """The release's patches as its lock records them."""
        return tuple(LockedPatch(p.name, p.entry.file, p.sha256) for p in self.release_patches)

    def with_overlay(self, overlay: LoadedOverlay | None) -> "LoadedSeries":
        """This release's series with `overlay` stacked on it; an overlay patch may not take the
        name of one of the release's (history, status and drift tell patches apart by name)."""
        if overlay is not None:
            release_names = {p.name for p in self.release_patches}
            for index, loaded in enumerate(overlay.patches):
                if loaded.name in release_names:
                    raise InvalidInput(f"{overlay.directory / SERIES_FILE}: series[{index}].name",
                                       f"{loaded.name!r} is also a patch of release {self.location.release}",
                                       hint=f"give the overlay's patch a name of its own, then {overlay.lock_hint()}")
        return LoadedSeries(self.location, self.series, self.release_patches, self.lock, overlay)


def _patch_problems(patches: tuple[LoadedPatch, ...], locked: tuple[LockedPatch, ...], lock_path: Path, hint: str = LOCK_HINT) -> list[str]:
    """Where the patch files disagree with a lock's list of them (names, files, sha256s, order)."""
    problems = []
    by_name = {p.name: p for p in locked}
    for loaded in patches:
        entry = by_name.get(loaded.name)
        if entry is None:
            problems.append(f"{loaded.path}: patch {loaded.name!r} is in series.yaml but not in {lock_path}")
        elif entry.file != loaded.entry.file:
            problems.append(f"{lock_path}: patch {loaded.name!r} names file {entry.file!r}, series.yaml says {loaded.entry.file!r}")
        elif entry.sha256 != loaded.sha256:
            problems.append(f"{loaded.path}: sha256 {loaded.sha256[:12]}… differs from {lock_path} ({entry.sha256[:12]}…)")
    names = [p.name for p in patches]
    for entry in locked:
        if entry.name not in names:
            problems.append(f"{lock_path}: patch {entry.name!r} is not in series.yaml")
    if not problems and [p.name for p in locked] != names:
        problems.append(f"{lock_path}: patch order differs from series.yaml")
    if problems and hint != LOCK_HINT:
        problems = [f"{problem} ({hint})" for problem in problems]
    return problems


def _refuse(problems: list[str]) -> None:
    if problems:
        where, _, problem = problems[0].partition(": ")
        raise InvalidInput(where, problem, hint=None if "rocmpatch lock" in problem else LOCK_HINT)


def load(location: Location, *, require_lock: bool = True, overlay: LoadedOverlay | None = None) -> LoadedSeries:
    """series.yaml, every patch file (parsed) and the release's lock entry, with `overlay` stacked
    on top; schema errors raise InvalidInput."""
    series = load_series(location.series_dir)
    patches = tuple(_load_patch(series, entry) for entry in series.entries)
    lock = None
    if require_lock or location.lock_path.exists():
        lock = load_lock_file(location.lock_path).releases.get(location.release)
    return LoadedSeries(location, series, patches, lock).with_overlay(overlay)


def load_overlay(directory: Path) -> LoadedOverlay:
    """An overlay folder: its series.yaml, patch files and overlay.lock (None when not written yet)."""
    directory = directory.expanduser().absolute()
    if not (directory / SERIES_FILE).is_file():
        raise InvalidInput(directory, f"holds no {SERIES_FILE}, so it is no overlay",
                           hint="an overlay folder holds series.yaml and patch files, as a release folder in patchsets/ does (see docs/frameworks.md)")
    series = load_series(directory)
    patches = tuple(_load_patch(series, entry, OVERLAY) for entry in series.entries)
    lock_path = directory / OVERLAY_LOCK_FILE
    lock = load_overlay_lock(lock_path) if lock_path.exists() or lock_path.is_symlink() else None
    return LoadedOverlay(directory, series, patches, lock)


def _load_patch(series: Series, entry: SeriesEntry, layer: str = RELEASE) -> LoadedPatch:
    path = series.patch_path(entry)
    if not path.exists() and not path.is_symlink():
        raise InvalidInput(path, f"patch file of {entry.name!r} not found", hint="series.yaml names it; add the file or fix series[].file")
    # bytes, never text mode (it would eat \r); a regular file only (a FIFO would hang us)
    data = read_regular_file(path, limit=MAX_PATCH_FILE, what="patch file")
    return loaded_patch(entry, data, path, layer)


def loaded_patch(entry: SeriesEntry, data: bytes, path: Path, layer: str = RELEASE) -> LoadedPatch:
    """A patch file's bytes parsed and hashed (the sha256 the lock records is of these bytes)."""
    text = data.decode("utf-8", "surrogateescape")
    patch = parse_patch(text, name=entry.name, source=str(path))
    return LoadedPatch(entry, patch, hashlib.sha256(data).hexdigest(), path, text, layer)
