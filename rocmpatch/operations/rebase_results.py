"""A finished rebase written into the project: the refreshed patch files (obsolete ones dropped),
series.yaml (its entries as they were, comments too, less the dropped ones), the lock entry, and
with --into a new release folder (release.yaml carried over); an overlay's files likewise.
Everything is computed and checked before the first file is written."""

from __future__ import annotations

from pathlib import Path

from rocmpatch import yamlio
from rocmpatch.errors import CheckFailed
from rocmpatch.files import replace_file
from rocmpatch.operations import locking
from rocmpatch.operations.rebase import Finished
from rocmpatch.schema import RELEASE_FILE, SERIES_FILE, OverlayLock, Series
from rocmpatch.series import LoadedOverlay, LoadedPatch, LoadedSeries, Location, loaded_patch


def write_results(loaded: LoadedSeries, finished: Finished) -> Location:
    """Write the refreshed patches, drop obsolete ones, and pin the new commit in upstream.lock:
    into the release's own folder, or (--into) into a new release folder, leaving the old one as it was.

    The lock is computed (the refreshed series applied exactly to the new commit) before any file
    is written, so a failure here leaves the project as it was."""
    destination = loaded.location.patchsets.location(finished.into) if finished.into else loaded.location
    kept = _kept(loaded.release_patches, finished, destination.series_dir)
    new_series = Series(destination.series_dir, tuple(p.entry for p in kept))
    new_loaded = LoadedSeries(destination, new_series, tuple(kept), loaded.lock)
    new_lock = locking.compute(new_loaded, locking.Pin(ref=finished.onto_ref, commit=finished.onto), url_override=finished.url)
    overlay = _carried_overlay(LoadedSeries(destination, new_series, tuple(kept), new_lock), loaded.overlay, finished)
    if overlay is None and new_lock.patched_tree != finished.tree:
        raise CheckFailed(f"the refreshed series gives tree {new_lock.patched_tree}, the rebase made {finished.tree}", hint="nothing was written; please report this")
    dropped = {p.name for p in loaded.release_patches if finished.texts[p.name] is None}
    series_text = without_entries(loaded.series.directory / SERIES_FILE, dropped)
    destination.series_dir.mkdir(parents=True, exist_ok=True)
    for patch in kept:
        replace_file(patch.path, patch.text.encode("utf-8", "surrogateescape"))
    if dropped or finished.into:
        replace_file(destination.series_dir / SERIES_FILE, series_text.encode("utf-8"))
    if not finished.into:
        for patch in loaded.release_patches:
            if patch.name in dropped:
                patch.path.unlink()
    elif (loaded.location.series_dir / RELEASE_FILE).is_file():
        replace_file(destination.series_dir / RELEASE_FILE, carried_release_info(loaded.location.series_dir / RELEASE_FILE, loaded.location.release).encode("utf-8"))
    locking.write(destination, new_lock)
    if overlay is not None:
        _write_overlay(loaded.overlay, *overlay, finished)
    return destination


def _kept(patches: tuple[LoadedPatch, ...], finished: Finished, directory: Path) -> list[LoadedPatch]:
    """The refreshed patches of one layer that upstream does not already hold, as files in `directory`."""
    return [loaded_patch(patch.entry, text.encode("utf-8", "surrogateescape"), directory / patch.entry.file, patch.layer)
            for patch in patches if (text := finished.texts[patch.name]) is not None]


def _carried_overlay(new_release: LoadedSeries, overlay: LoadedOverlay | None, finished: Finished) -> tuple[LoadedOverlay, OverlayLock] | None:
    """The overlay's refreshed patches and its new lock on the rebased release (computed, nothing
    written); None without an overlay. CheckFailed when every overlay patch is upstream now (an
    overlay cannot be empty: the framework drops it) or the trees disagree."""
    if overlay is None:
        return None
    kept = _kept(overlay.patches, finished, overlay.directory)
    if not kept:
        raise CheckFailed(f"every patch of the overlay {overlay.directory} is upstream now; nothing was written",
                          hint="drop the overlay (and --overlay), then rerun the rebase")
    carried = LoadedOverlay(overlay.directory, Series(overlay.directory, tuple(p.entry for p in kept)), tuple(kept), None)
    lock = locking.compute_overlay(new_release.with_overlay(carried), url_override=finished.url)
    if lock.patched_tree != finished.tree:
        raise CheckFailed(f"the refreshed series and overlay give tree {lock.patched_tree}, the rebase made {finished.tree}", hint="nothing was written; please report this")
    return carried, lock


def _write_overlay(old: LoadedOverlay, carried: LoadedOverlay, lock: OverlayLock, finished: Finished) -> None:
    """DIR's refreshed patch files, series.yaml without the patches upstream now holds, overlay.lock."""
    for patch in carried.patches:
        replace_file(patch.path, patch.text.encode("utf-8", "surrogateescape"))
    dropped = {p.name for p in old.patches if finished.texts[p.name] is None}
    if dropped:
        text = without_entries(old.directory / SERIES_FILE, dropped)
        replace_file(old.directory / SERIES_FILE, text.encode("utf-8"))
        for patch in old.patches:
            if patch.name in dropped:
                patch.path.unlink()
    locking.write_overlay(carried, lock)


NOT_CARRIED = ("default", "wheel", "validated")  # the new release is not the default, has its own wheel, ran nowhere yet


def carried_release_info(path: Path, source_release: str) -> str:
    """release.yaml for a release started from `source_release`: its smoke profile, install block and
    upstream test profile (and comments) kept, since the new tree most likely needs the same, but not
    `default:` (one release is the default), `wheel:` (the old tree's bytes) or `validated:` records
    (nothing has run on the new tree yet)."""
    replacement = (f"# Started from {source_release} by 'rocmpatch rebase --into': what is below is carried over (check\n"
                   "# it against this tree's layout); add this tree's test wheel (docs/adding-a-release.md); nothing\n"
                   "# has been validated on this tree yet.\n"
                   "validated: []\n")
    text, root = yamlio.composed(path)
    lines = text.splitlines(keepends=True)
    pairs = root.value if root is not None and isinstance(root.value, list) else []
    keys = [key for key, _ in pairs]
    cut: set[int] = set()
    for index, (key, value) in enumerate(pairs):
        if key.value not in NOT_CARRIED:
            continue
        start, end = _line_span(keys, index, value)
        while end - 1 > start and lines[end - 1].strip()[:1] in ("#", ""):
            end -= 1  # comments before the next key belong to it
        while start > 0 and lines[start - 1].startswith("#"):
            start -= 1  # and those right above this key to this one
        cut.update(range(start, end))
    return replacement + "".join(line for number, line in enumerate(lines) if number not in cut)


def _line_span(starts: list, index: int, last) -> tuple[int, int]:
    """Lines [start, end) of the index-th of consecutive YAML nodes (`starts`, where each begins):
    up to where the next begins, or for the last one to the end of `last` (its value)."""
    if index + 1 < len(starts):
        return starts[index].start_mark.line, starts[index + 1].start_mark.line
    return starts[index].start_mark.line, last.end_mark.line + (last.end_mark.column > 0)


def without_entries(path: Path, names: set[str]) -> str:
    """series.yaml's text with the entries named `names` cut out, everything else (comments too) kept."""
    text, root = yamlio.composed(path)
    if not names:
        return text
    items = dict((k.value, v) for k, v in root.value)["series"].value
    lines = text.splitlines(keepends=True)
    cut: set[int] = set()
    for index, item in enumerate(items):
        name = dict((k.value, v.value) for k, v in item.value).get("name")
        if name in names:
            cut.update(range(*_line_span(items, index, item)))
    return "".join(line for number, line in enumerate(lines) if number not in cut)
