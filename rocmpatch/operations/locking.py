"""`rocmpatch lock`: compute a release's entry in upstream.lock from its series.yaml, patch files
and upstream commit.

The lock is the only place the pins and the patched tree ids are written; apply, verify and check
trust nothing else. Re-pinning (a new commit) goes through here too, e.g. from `rebase`. Writing one
release's entry keeps every other release's entry as it is.

Each patch file's header is written from its series.yaml entry first (rocmpatch.patch_header: the
entry is the one source of a patch's words), so the sha256 the lock records is of the file as
written; `--check` reports each header that says something else (`header_problems`).

With `--overlay DIR`, only the overlay's own lock (DIR/overlay.lock) is written: the release it
applies to, its patches' sha256s and the tree after the release's series plus the overlay. The
release's lock must be current (it is rocmpatch's, not the framework's).
"""

from __future__ import annotations

import dataclasses
import datetime
import stat
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd, patch_header, store
from rocmpatch.errors import InvalidInput
from rocmpatch.files import replace_file
from rocmpatch.schema import SERIES_FILE, Lock, LockedPatch, LockFile, OverlayLock, Series, Upstream, is_full_commit_id
from rocmpatch.series import LOCK_HINT, LoadedOverlay, LoadedPatch, LoadedSeries, Location, loaded_patch
from rocmpatch.trees import patch_trees


@dataclass(frozen=True)
class Pin:
    """What to pin; each None field keeps the current lock's value."""

    url: str | None = None
    ref: str | None = None
    commit: str | None = None


def _entry_where(series: Series, index: int) -> str:
    return f"{series.directory / SERIES_FILE}: series[{index}]"


def with_headers(series: Series, patches: tuple[LoadedPatch, ...]) -> tuple[LoadedPatch, ...]:
    """The patches as `lock` writes them: each file's header from its entry, its diff as it is
    (InvalidInput naming series.yaml when an entry's text cannot be a header)."""
    rewritten = []
    for index, loaded in enumerate(patches):
        text = patch_header.with_header(loaded.entry, loaded.text, _entry_where(series, index))
        same = text == loaded.text
        rewritten.append(loaded if same else loaded_patch(loaded.entry, text.encode("utf-8", "surrogateescape"), loaded.path, loaded.layer))
    return tuple(rewritten)


def header_problems(series: Series, patches: tuple[LoadedPatch, ...], hint: str) -> list[str]:
    """One line per patch file whose header is not what `lock` writes from its entry: the file,
    the line, the first field that differs."""
    problems = []
    for index, loaded in enumerate(patches):
        found = patch_header.difference(loaded.entry, loaded.text, _entry_where(series, index))
        if found is None:
            continue
        if found.field == "layout":
            problem = f"the header's fields agree with series[{index}] in {SERIES_FILE}, but not its layout ('[PATCH n/m]', the Date, the folding)"
        else:
            problem = f"the header's {found.field} differs from series[{index}].{found.field} in {SERIES_FILE}"
        problems.append(f"{loaded.path}:{found.line}: {problem} ({hint})")
    return problems


def write_patch_files(old: tuple[LoadedPatch, ...], new: tuple[LoadedPatch, ...]) -> list[LoadedPatch]:
    """Replace each patch file whose text changed (atomically, one by one); the ones written."""
    written = []
    for before, after in zip(old, new):
        if after.text != before.text:
            mode = stat.S_IMODE(before.path.stat().st_mode)  # as it was, not mkstemp's 0600
            replace_file(after.path, after.text.encode("utf-8", "surrogateescape"), mode=mode)
            written.append(after)
    return written


def with_release_headers(loaded: LoadedSeries) -> LoadedSeries:
    """`loaded` with the release's patches as `lock` writes them."""
    return dataclasses.replace(loaded, release_patches=with_headers(loaded.series, loaded.release_patches))


def with_overlay_headers(loaded: LoadedSeries) -> LoadedSeries:
    """`loaded` with the overlay's patches as `lock --overlay` writes them (the release's as they are:
    they are rocmpatch's, and locked)."""
    overlay = loaded.overlay
    assert overlay is not None
    return loaded.with_overlay(dataclasses.replace(overlay, patches=with_headers(overlay.series, overlay.patches)))


def compute(loaded: LoadedSeries, pin: Pin = Pin(), *, url_override: str | None = None) -> Lock:
    current = loaded.lock.upstream if loaded.lock else None
    url = pin.url or (current.url if current else None)
    ref = pin.ref or (current.ref if current else None)
    commit = pin.commit or (current.commit if current else None)
    if not (url and ref and commit):
        release = loaded.location.release
        raise InvalidInput(loaded.location.lock_path, f"has no pin for release {release!r}, and none was given",
                           hint=f"run 'rocmpatch lock --release {release} --url URL --ref TAG --commit <40-hex id>' once")
    if not is_full_commit_id(commit):
        raise InvalidInput("--commit", f"expected a full 40-hex commit id, got {commit!r}", hint="a tag or branch name belongs in --ref")
    gitcmd.check_url(url, source="--url")
    # A new commit has no known tree yet: the cache checks it only when the lock had one.
    known_tree = current.tree if current and current.commit == commit else ""
    repo = store.cached_repo(Upstream(url, ref, commit, known_tree), url_override)
    tree = gitcmd.tree_of(repo, commit)
    date = gitcmd.commit_date(repo, commit).astimezone(datetime.timezone.utc).isoformat()  # UTC: sorts as text
    with store.scratch_over(repo) as scratch:  # the cache is only read (`lock --check` on a read-only cache)
        steps = patch_trees(scratch, tree, loaded.release_patches)
    return Lock(Upstream(url, ref, commit, tree, date), loaded.locked_patches(), steps[-1].tree)


def write(location: Location, lock: Lock) -> None:
    """Replace the release's entry, keeping the others; atomically: a reader sees the old lock or the new one."""
    current = location.patchsets.lock_file() or LockFile({})
    path: Path = location.lock_path
    replace_file(path, current.with_release(location.release, lock).to_yaml().encode("utf-8"))


def stale_fields(old: Lock | None, new: Lock) -> list[str]:
    """What differs between the committed lock and a fresh one, as short phrases."""
    if old is None:
        return ["everything (there was no lock)"]
    found = []
    for field in ("url", "ref", "commit", "tree", "date"):
        if getattr(old.upstream, field) != getattr(new.upstream, field):
            found.append(f"upstream.{field}")
    old_patches = {p.name: p for p in old.patches}
    for patch in new.patches:
        if old_patches.get(patch.name) != patch:
            found.append(f"patch {patch.name}")
    for name in old_patches.keys() - {p.name for p in new.patches}:
        found.append(f"patch {name} (no longer in the series)")
    if not found and [p.name for p in old.patches] != [p.name for p in new.patches]:
        found.append("patch order")
    if old.patched_tree != new.patched_tree:
        found.append("patched_tree")
    return found


def compute_overlay(loaded: LoadedSeries, *, url_override: str | None = None) -> OverlayLock:
    """The overlay's lock: the release's series applied to its pin, then the overlay's patches,
    through the one applier. The release's lock must agree with its patch files and give the tree
    it records (else InvalidInput naming upstream.lock)."""
    overlay = loaded.overlay
    assert overlay is not None
    lock = loaded.release_locked()
    repo = store.cached_repo(lock.upstream, url_override)
    with store.scratch_over(repo) as scratch:
        steps = patch_trees(scratch, lock.upstream.tree, loaded.patches)
    release_tree = steps[len(loaded.release_patches) - 1].tree
    if release_tree != lock.patched_tree:
        raise InvalidInput(f"{loaded.location.lock_path}: patched_tree", f"is {lock.patched_tree}, but release {loaded.location.release}'s series gives {release_tree}", hint=LOCK_HINT)
    patches = tuple(LockedPatch(p.name, p.entry.file, p.sha256) for p in overlay.patches)
    return OverlayLock(loaded.location.release, release_tree, patches, steps[-1].tree)


def write_overlay(overlay: LoadedOverlay, lock: OverlayLock) -> None:
    """Replace DIR/overlay.lock atomically."""
    replace_file(overlay.lock_path, lock.to_yaml().encode("utf-8"))


def overlay_stale_fields(old: OverlayLock | None, new: OverlayLock) -> list[str]:
    """What differs between an overlay's committed lock and a fresh one, as short phrases."""
    if old is None:
        return ["everything (there was no overlay.lock)"]
    found = [field for field in ("release", "release_tree") if getattr(old, field) != getattr(new, field)]
    old_patches = {p.name: p for p in old.patches}
    found += [f"patch {p.name}" for p in new.patches if old_patches.get(p.name) != p]
    found += [f"patch {name} (no longer in the overlay)" for name in old_patches.keys() - {p.name for p in new.patches}]
    if not found and [p.name for p in old.patches] != [p.name for p in new.patches]:
        found.append("patch order")
    if old.patched_tree != new.patched_tree:
        found.append("patched_tree")
    return found
