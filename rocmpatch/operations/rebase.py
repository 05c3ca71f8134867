"""Carry the series to a newer upstream commit, one patch at a time, as `git am -3` does.

For patch i, ORIG(i-1) is the pin with patches 1..i-1 applied as they are, and NEW(i-1) is the new
upstream commit with the rebased patches 1..i-1. Patch i is first applied exactly to NEW(i-1)
("clean"); failing that, it is merged 3-way: base ORIG(i-1), ours NEW(i-1), theirs ORIG(i-1) + patch i,
with git's rename detection, so a patch follows a file upstream moved ("merged"). A merge that
changes nothing means upstream already has the patch ("obsolete", dropped). A merge with conflicts
stops the rebase ("conflict"):

* all work lives in a state directory per release (`.git/rocmpatch-rebase-<release>/` of the
  project, or `.rocmpatch-rebase-<release>/` outside git), so rebases of two releases can be in
  progress at once: a scratch bare repository that borrows the upstream's objects, a worktree
  holding the conflicted files with markers, and state.json;
* `--continue` takes the worktree's files as patch i and goes on; `--abort` deletes the directory.

Each patch goes through the same applier as apply and check (rocmpatch.trees.SeriesApplier: the
same path, mode and symlink safety). The series files and upstream.lock are written only when
every patch is through, so a stopped or aborted rebase has changed nothing of the project.

With an overlay (`--overlay DIR`), its patches follow the release's in the same chain, so each is
carried onto the rebased release series; when all are through, DIR's patch files and overlay.lock
are rewritten too (for the release written: --into's, or the release itself).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from rocmpatch import gitcmd
from rocmpatch.operations import locking
from rocmpatch.errors import (
    Busy,
    CheckFailed,
    InvalidInput,
    PatchConflict,
    RocmpatchError,
    TargetRefused,
)
from rocmpatch.files import MAX_TEXT_FILE, read_regular_file, replace_file
from rocmpatch.gitcmd import Identity
from rocmpatch.schema import RELEASE_FILE, SERIES_FILE, YAML_LOADER, OverlayLock, Series
from rocmpatch.series import OVERLAY, LoadedOverlay, LoadedPatch, LoadedSeries, Location, loaded_patch
from rocmpatch.trees import SeriesApplier

STATE_NAME = "rocmpatch-rebase"
CLEAN, MERGED, CONFLICT, RESOLVED, OBSOLETE = "applied clean", "merged", "conflict", "resolved", "dropped as obsolete"
CONFLICT_MARKERS = ("<<<<<<< ", ">>>>>>> ")


@dataclass
class Outcome:
    name: str
    result: str  # CLEAN, MERGED, CONFLICT (stopped here), RESOLVED or OBSOLETE
    files: list[str] = field(default_factory=list)  # the conflicted files


@dataclass
class State:
    """What a stopped rebase needs to go on; saved as state.json."""

    onto: str
    onto_ref: str
    url: str  # where the upstream came from (written into nothing; the new lock keeps its url)
    into: str | None  # the new release the result is written as; None: rewrite the release itself
    source_objects: str  # the upstream object directory the scratch repository borrows
    series_sha256: dict[str, str]  # patch file -> sha256 when the rebase began (edits are refused)
    originals: list[str]  # ORIG(i) commits, i = 1..n, in the scratch repository
    tip: str  # NEW(done)
    rebased: list[str | None] = field(default_factory=list)  # per finished patch: its commit, or None if dropped
    outcomes: list[Outcome] = field(default_factory=list)
    overlay: str | None = None  # the overlay folder whose patches follow the release's, if any

    @property
    def done(self) -> int:
        return len(self.rebased)


@dataclass
class Finished:
    """A rebase that went through: the refreshed patch texts (None: dropped) and the final tree."""

    onto: str
    onto_ref: str
    url: str
    into: str | None
    texts: dict[str, str | None]
    tree: str
    outcomes: list[Outcome]


@dataclass
class Stopped:
    patch: str
    files: list[str]
    worktree: Path
    outcomes: list[Outcome]


def state_dir(project: Path, release: str) -> Path:
    """Inside the project's .git when the project is a git checkout (never committed by accident)."""
    name = f"{STATE_NAME}-{release}"
    try:
        return Path(gitcmd.run(project, "rev-parse", "--path-format=absolute", "--git-path", name))
    except RocmpatchError:  # not a git checkout
        return project / f".{name}"


def in_progress(project: Path, releases: list[str]) -> list[str]:
    """Those of `releases` with a stopped rebase."""
    return [r for r in releases if (state_dir(project, r) / "state.json").is_file()]


def start(project: Path, release: str, source: gitcmd.Repo, pin: str, onto: str, onto_ref: str, patches: list[LoadedPatch],
          *, url: str = "", into: str | None = None, overlay: Path | None = None) -> Finished | Stopped:
    directory = state_dir(project, release)
    if directory.exists():
        raise Busy(f"a rebase of {release} is already in progress ({directory})",
                   hint=f"run 'rocmpatch rebase --release {release} --continue' or '--abort'")
    directory.mkdir(parents=True)
    try:
        work = gitcmd.init_borrowing_repo(directory / "objects.git", source)
        originals = _original_chain(work, pin, patches)
        state = State(onto, onto_ref, url, into, str(gitcmd.objects_dir(source)), _sha256s(patches), originals, onto,
                      overlay=str(overlay) if overlay is not None else None)
        return _carry(directory, work, state, patches)
    except BaseException:
        if not (directory / "state.json").is_file():
            shutil.rmtree(directory, ignore_errors=True)  # nothing worth keeping: as if never started
        raise


def resume(project: Path, release: str, patches: list[LoadedPatch]) -> Finished | Stopped:
    directory, state = _load(project, release)
    if _sha256s(patches) != state.series_sha256:
        raise TargetRefused("the series changed while the rebase was stopped", hint="restore the patch files, or run 'rocmpatch rebase --abort'")
    work = gitcmd.open_repo(directory / "objects.git")
    worktree = directory / "worktree"
    current = state.outcomes[-1]
    _refuse_markers(worktree, current.files)
    tree = gitcmd.worktree_tree(gitcmd.open_repo(worktree))
    _remove_worktree(work, worktree)
    current.result = RESOLVED
    _record(work, state, patches[state.done], tree)
    return _carry(directory, work, state, patches)


def abort(project: Path, release: str) -> Path:
    directory = state_dir(project, release)
    if not directory.exists():
        raise TargetRefused("no rebase in progress", hint="start one with 'rocmpatch rebase --onto REF'")
    shutil.rmtree(directory)
    return directory


def finish(project: Path, release: str) -> None:
    """Forget a rebase whose results were written."""
    shutil.rmtree(state_dir(project, release), ignore_errors=True)


def _applied(work: gitcmd.Repo, tree: str, item: LoadedPatch) -> str:
    """The tree after applying one patch exactly, through the one applier every command uses."""
    applier = SeriesApplier(work, tree)
    applier.apply(item)
    return applier.tree()


def _original_chain(work: gitcmd.Repo, pin: str, patches: list[LoadedPatch]) -> list[str]:
    """ORIG(1..n): the series as it is, applied exactly on the pin, one commit per patch."""
    chain, parent = [], pin
    for item in patches:
        try:
            tree = _applied(work, gitcmd.tree_of(work, parent), item)
        except PatchConflict as conflict:
            raise CheckFailed(f"the series does not apply at the pin: {conflict}", hint="run 'rocmpatch check' and fix the series first") from None
        parent = _commit(work, tree, parent, item)
        chain.append(parent)
    return chain


def _carry(directory: Path, work: gitcmd.Repo, state: State, patches: list[LoadedPatch]) -> Finished | Stopped:
    while state.done < len(patches):
        item = patches[state.done]
        base = state.originals[state.done - 1] if state.done else _parent(work, state.originals[0])
        tip_tree = gitcmd.tree_of(work, state.tip)
        try:
            tree = _applied(work, tip_tree, item)
            state.outcomes.append(Outcome(item.name, CLEAN))
            _record(work, state, item, tree)
            continue
        except PatchConflict:
            pass
        # `git am -3`: ours is NEW(i-1) and theirs ORIG(i), both children of ORIG(i-1), so that
        # ORIG(i-1) is their merge base. Synthetic commits in the scratch repository only.
        ours = _commit_with(work, tip_tree, base, "rebased series so far")
        # Named refs, because merge-tree labels the conflict markers with the names it is given.
        gitcmd.update_ref(work, "refs/heads/upstream", ours)
        gitcmd.update_ref(work, f"refs/heads/patch/{item.name}", state.originals[state.done])
        merged = gitcmd.merge_commits(work, "upstream", f"patch/{item.name}")
        if not merged.conflicts:
            state.outcomes.append(Outcome(item.name, OBSOLETE if merged.tree == tip_tree else MERGED))
            _record(work, state, item, merged.tree)
            continue
        state.outcomes.append(Outcome(item.name, CONFLICT, list(merged.conflicts)))
        worktree = directory / "worktree"
        gitcmd.add_worktree(work, worktree, state.tip, merged.tree)
        _save(directory, state)
        return Stopped(item.name, list(merged.conflicts), worktree, state.outcomes)
    texts: dict[str, str | None] = {}
    for item, commit in zip(patches, state.rebased):
        texts[item.name] = _refreshed(item.text, gitcmd.format_patch(work, commit)) if commit else None
    return Finished(state.onto, state.onto_ref, state.url, state.into, texts, gitcmd.tree_of(work, state.tip), state.outcomes)


def _refreshed(old: str, new: str) -> str:
    """The new text, or the old one byte for byte when the diff itself did not change (its
    header, e.g. a "[PATCH 03/10]" subject, is then kept as the author wrote it)."""
    return old if _diff_part(old) == _diff_part(new) else new


def _diff_part(text: str) -> str:
    start = text.find("\ndiff --git ")
    return text[start:] if start >= 0 else text


def _record(work: gitcmd.Repo, state: State, item: LoadedPatch, tree: str) -> None:
    if tree == gitcmd.tree_of(work, state.tip):
        state.rebased.append(None)  # nothing left of the patch: upstream has it
        state.outcomes[-1].result = OBSOLETE
        return
    state.tip = _commit(work, tree, state.tip, item)
    state.rebased.append(state.tip)


def _commit(work: gitcmd.Repo, tree: str, parent: str, item: LoadedPatch) -> str:
    """A commit carrying the patch's own author, date and message, so format-patch repeats them."""
    info = gitcmd.mail_info(work, item.text)
    return gitcmd.commit_tree(work, tree, parent, info.message(), Identity(info.author, info.email, info.date))


def _commit_with(work: gitcmd.Repo, tree: str, parent: str, message: str) -> str:
    identity = Identity("rocmpatch", "rocmpatch@localhost", gitcmd.commit_date(work, parent))
    return gitcmd.commit_tree(work, tree, parent, message, identity)


def _parent(work: gitcmd.Repo, commit: str) -> str:
    parent = gitcmd.commit_info(work, commit).parent
    assert parent is not None
    return parent


def _sha256s(patches: list[LoadedPatch]) -> dict[str, str]:
    return {(f"overlay/{p.entry.file}" if p.layer == OVERLAY else p.entry.file): p.sha256 for p in patches}


def stopped_overlay(project: Path, release: str) -> Path | None:
    """The overlay folder a stopped rebase of `release` carries, if any."""
    overlay = _load(project, release)[1].overlay
    return Path(overlay) if overlay else None


def _refuse_markers(worktree: Path, files: list[str]) -> None:
    for name in files:
        path = worktree / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), start=1):
            if line.startswith(CONFLICT_MARKERS):
                raise InvalidInput(f"{path}:{number}", "conflict marker still there", hint="resolve the conflict, then run 'rocmpatch rebase --continue'")


def _remove_worktree(work: gitcmd.Repo, worktree: Path) -> None:
    shutil.rmtree(worktree)
    gitcmd.run(work, "worktree", "prune")


def _save(directory: Path, state: State) -> None:
    replace_file(directory / "state.json", json.dumps(asdict(state), indent=2).encode("utf-8"))


def _load(project: Path, release: str) -> tuple[Path, State]:
    directory = state_dir(project, release)
    path = directory / "state.json"
    if not path.is_file():
        raise TargetRefused("no rebase in progress", hint="start one with 'rocmpatch rebase --onto REF'")
    try:
        data = json.loads(read_regular_file(path, limit=MAX_TEXT_FILE, what="rebase state"))
        data["outcomes"] = [Outcome(**o) for o in data["outcomes"]]
        data.setdefault("into", None)
        data.setdefault("overlay", None)
        state = State(**data)
        _check_types(state)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # JSON, missing or unknown keys, wrong types
        raise InvalidInput(path, f"not a rebase state rocmpatch wrote ({type(exc).__name__}: {exc})",
                           hint="run 'rocmpatch rebase --abort' (the series and upstream.lock are as they were), then start again") from None
    return directory, state


def _check_types(state: State) -> None:
    """ValueError when a field of a loaded state.json has the wrong type (JSON gives any)."""
    text = (state.onto, state.onto_ref, state.url, state.source_objects, state.tip)
    if not all(isinstance(value, str) for value in text) or not all(isinstance(v, (str, type(None))) for v in (state.into, state.overlay)):
        raise ValueError("a text field is not a string")
    if not isinstance(state.series_sha256, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in state.series_sha256.items()):
        raise ValueError("series_sha256 is not a map of strings")
    if not isinstance(state.originals, list) or not all(isinstance(c, str) for c in state.originals):
        raise ValueError("originals is not a list of commits")
    if not isinstance(state.rebased, list) or not all(isinstance(c, (str, type(None))) for c in state.rebased):
        raise ValueError("rebased is not a list of commits")
    if not state.outcomes or not all(isinstance(o.name, str) and isinstance(o.result, str) and isinstance(o.files, list) for o in state.outcomes):
        raise ValueError("outcomes is empty or malformed")


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
    series_text = without_entries((loaded.series.directory / SERIES_FILE).read_text(encoding="utf-8"), dropped)
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
        old_info = (loaded.location.series_dir / RELEASE_FILE).read_text(encoding="utf-8")
        replace_file(destination.series_dir / RELEASE_FILE, carried_release_info(old_info, loaded.location.release).encode("utf-8"))
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
        text = without_entries((old.directory / SERIES_FILE).read_text(encoding="utf-8"), dropped)
        replace_file(old.directory / SERIES_FILE, text.encode("utf-8"))
        for patch in old.patches:
            if patch.name in dropped:
                patch.path.unlink()
    locking.write_overlay(carried, lock)


def carried_release_info(text: str, source_release: str) -> str:
    """release.yaml for a release started from `source_release`: its smoke profile (and comments)
    kept, since the new tree most likely runs the same checks, but no `validated:` record: nothing
    has run on the new tree yet."""
    replacement = (f"# Started from {source_release} by 'rocmpatch rebase --into': the smoke profile below is carried\n"
                   "# over (check it against this tree's layout); nothing has been validated on this tree yet.\n"
                   "validated: []\n")
    root = yaml.compose(text, Loader=YAML_LOADER)
    lines = text.splitlines(keepends=True)
    pairs = root.value if root is not None and isinstance(root.value, list) else []
    keys = [key for key, _ in pairs]
    for index, (key, value) in enumerate(pairs):
        if key.value != "validated":
            continue
        start, end = _line_span(keys, index, value)
        while end - 1 > start and lines[end - 1].strip()[:1] in ("#", ""):
            end -= 1  # comments before the next key belong to it
        return "".join(lines[:start]) + replacement + "".join(lines[end:])
    return replacement + text


def _line_span(starts: list, index: int, last) -> tuple[int, int]:
    """Lines [start, end) of the index-th of consecutive YAML nodes (`starts`, where each begins):
    up to where the next begins, or for the last one to the end of `last` (its value)."""
    if index + 1 < len(starts):
        return starts[index].start_mark.line, starts[index + 1].start_mark.line
    return starts[index].start_mark.line, last.end_mark.line + (last.end_mark.column > 0)


def without_entries(text: str, names: set[str]) -> str:
    """series.yaml with the entries named `names` cut out, everything else (comments too) kept."""
    if not names:
        return text
    root = yaml.compose(text, Loader=YAML_LOADER)
    items = dict((k.value, v) for k, v in root.value)["series"].value
    lines = text.splitlines(keepends=True)
    cut: set[int] = set()
    for index, item in enumerate(items):
        name = dict((k.value, v.value) for k, v in item.value).get("name")
        if name in names:
            cut.update(range(*_line_span(items, index, item)))
    return "".join(line for number, line in enumerate(lines) if number not in cut)
