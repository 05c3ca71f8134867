"""`rocmpatch apply`: bring a target to pin + series (+ an overlay's series), atomically.

All patched trees are computed in memory first; only when the whole series applied are commits
created and the target moved (see moves.move). A new directory is built beside its final
place and renamed into it, so it appears only complete.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, moves, statcache, store, target
from rocmpatch.interrupts import mark_done
from rocmpatch.processes import interruption_point
from rocmpatch.errors import EnvironmentProblem, InvalidInput, TargetRefused, UpstreamError
from rocmpatch.files import current_umask
from rocmpatch.schema import Lock
from rocmpatch.series import LOCK_HINT, LoadedPatch, LoadedSeries
from rocmpatch.trees import Step, lock_mismatches, patch_trees

EDITS_HINT = "commit or stash your changes elsewhere, or run 'rocmpatch unapply --force' to save them as a patch file"


@dataclass
class ApplyResult:
    target: Path
    created: bool  # the target directory was made by this run
    already: list[str] = field(default_factory=list)  # names applied before this run
    applied: list[str] = field(default_factory=list)  # names applied (or, with --dry-run, to apply) now
    recovered: moves.Recovered | None = None  # an interrupted operation this run finished (or rolled back) first
    head: str | None = None
    dry_run: bool = False
    unwritable_cache: Path | None = None  # the cache entry could not keep the series: applied in the new target instead


def apply(loaded: LoadedSeries, directory: Path, *, url_override: str | None = None, dry_run: bool = False) -> ApplyResult:
    lock = loaded.locked()
    gitcmd.require_git()
    directory = directory.absolute()
    if not directory.exists() or (directory.is_dir() and not any(directory.iterdir())):
        return _apply_new(loaded, lock, directory, url_override, dry_run)
    repo = target.open_target(directory, creating=True)
    if Path(repo.working_tree_dir or "").resolve() != directory.resolve():
        raise TargetRefused(f"{directory}: is inside the git repository {repo.working_tree_dir}, not its top", hint="give the checkout's top directory")
    target.require_writable(repo)
    with target.locked(repo):
        result = ApplyResult(directory, created=False, dry_run=dry_run)
        if not dry_run:
            result.recovered = moves.recover(repo)
        _apply_existing(repo, loaded, lock, result)
        if not dry_run and (result.applied or result.recovered or not statcache.recorded(Path(repo.working_tree_dir))):
            statcache.refresh(repo, loaded.patched_tree)  # what verify will not need to read again
        return result


def _apply_new(loaded: LoadedSeries, lock: Lock, directory: Path, url_override: str | None, dry_run: bool) -> ApplyResult:
    if not dry_run:
        parent = directory.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise TargetRefused(f"{parent}: not writable, so {directory} cannot be created; nothing was changed", hint="choose a --target in a directory you may write")
    cache = store.cached_repo(lock.upstream, url_override)
    result = ApplyResult(directory, created=True, dry_run=dry_run)
    if dry_run:
        with store.scratch_over(cache) as scratch:
            steps = _planned_steps(scratch, loaded, loaded.patches, lock.upstream.tree)
        result.applied = [s.patch.name for s in steps]
        return result
    moves.refuse_unwritable_names(directory, sorted({path for patch in loaded.patches for path in patch.patch.paths}))
    series_head = _kept_series_head(cache, loaded, lock)
    if series_head is None:
        result.unwritable_cache = gitcmd.git_dir(cache)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(directory)
    # The owner's pid in the name tells a later run whether this is a leftover of a dead process.
    building = Path(tempfile.mkdtemp(prefix=f".{directory.name}.{os.getpid()}.", suffix=PARTIAL_SUFFIX, dir=directory.parent))
    try:
        os.chmod(building, 0o777 & ~current_umask())  # mkdtemp made it 0700; a checkout gets the umask's mode
        if series_head is not None:
            repo = target.materialize(building, cache, series_head, lock.upstream.url, message="rocmpatch apply: the pin plus the series")
            result.applied, result.head = [p.name for p in loaded.patches], series_head
        else:
            repo = target.materialize(building, cache, lock.upstream.commit, lock.upstream.url)
            _apply_existing(repo, loaded, lock, result)
        statcache.refresh(repo, loaded.patched_tree, final_root=directory, check=lambda found: _check_new_target(repo, cache, loaded.patched_tree, found))
        repo.close()
        try:
            os.rename(building, directory)  # atomic; replaces an empty directory, fails on a non-empty one
        except OSError as exc:
            raise TargetRefused(f"{directory}: appeared while it was being built ({exc.strerror})", hint="another process created it; rerun apply to update it") from None
        _done(directory, result.head)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    result.target = directory
    return result


def _check_new_target(repo: gitcmd.Repo, cache: gitcmd.Repo, patched_tree: str, found) -> None:
    """Every object a new target got from the cache matches its id (git does not check this when
    it checks a file out): the files written, hashed by rocmpatch, must make the locked
    patched_tree (the overlay's, when one is stacked on the series); every other object is hashed
    as git reads it. A cache copied from another machine with one blob swapped is refused here,
    and the new target is never put in place."""
    if found.tree == patched_tree:
        bad = gitcmd.objects_not_matching_ids(repo, skip=found.trees | {entry.sha for entry in found.entries.values()})
    else:
        bad = gitcmd.objects_not_matching_ids(repo)
    entry = gitcmd.git_dir(cache)
    if bad:
        sha, kind = bad[0]
        raise UpstreamError(f"{entry}: the cache entry holds {len(bad)} object(s) whose content does not match their id "
                            f"(the {kind} {sha}, first); nothing was created",
                            hint=f"delete {entry} and run 'rocmpatch fetch' again (or copy the cache again from a machine whose entry is intact)")
    if found.tree != patched_tree:
        expected = gitcmd.list_tree(repo, patched_tree)
        differing = sorted(path for path in expected.keys() | found.entries.keys() if expected.get(path) != found.entries.get(path))
        raise EnvironmentProblem(f"{repo.working_tree_dir}: git checked out {len(differing)} file(s) other than their blobs "
                                 f"({', '.join(differing[:3])}); nothing was created",
                                 hint="a line-ending or filter setting converted them (.gitattributes, the git template's info/attributes); remove it and rerun")


def _kept_series_head(cache: gitcmd.Repo, loaded: LoadedSeries, lock: Lock) -> str | None:
    """The pin plus the whole series as commits in the cache (made by the first new target, reused
    by every later one); None when the cache cannot be written."""
    pin = lock.upstream.commit

    def commit_series(repo: gitcmd.Repo) -> str:
        head = pin
        for step in _planned_steps(repo, loaded, loaded.patches, lock.upstream.tree):
            head = history.commit_patch(repo, step.patch, step.tree, head, pin)
        return head

    return store.series_head(cache, history.series_key(loaded.patches, pin), loaded.patched_tree, commit_series)


def _done(directory, head: str | None) -> None:
    mark_done(f"{directory} is at the pin plus the series (HEAD {head})")
    interruption_point("applied")


PARTIAL_SUFFIX = ".rocmpatch-partial"
STALE_UNOWNED_SECONDS = 24 * 3600  # a partial directory without an owner pid (older versions)


def _remove_stale_partials(directory: Path) -> None:
    """Delete `.NAME.<pid>.*.rocmpatch-partial` directories beside `directory` whose process is
    gone (killed mid-build); a live process's build is never touched."""
    owned = re.compile(rf"\.{re.escape(directory.name)}\.(\d+)\.[a-z0-9_]{{8}}{re.escape(PARTIAL_SUFFIX)}")
    unowned = re.compile(rf"\.{re.escape(directory.name)}\.[a-z0-9_]{{8}}{re.escape(PARTIAL_SUFFIX)}")
    for entry in directory.parent.iterdir():
        match = owned.fullmatch(entry.name)
        if (match is None and not unowned.fullmatch(entry.name)) or entry.is_symlink() or not entry.is_dir():
            continue
        if match is not None:
            stale = not process_alive(int(match[1]))
        else:
            stale = time.time() - entry.stat().st_mtime > STALE_UNOWNED_SECONDS
        if stale:
            shutil.rmtree(entry, ignore_errors=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    except OverflowError:
        return False
    return True


def _apply_existing(repo: gitcmd.Repo, loaded: LoadedSeries, lock: Lock, result: ApplyResult) -> None:
    pin = lock.upstream.commit
    state = history.read(repo, pin)
    history.refuse_user_work(repo, state)
    if state.base != pin:
        where = f"commit {state.base}" if state.base else "no commit"
        raise TargetRefused(f"{repo.working_tree_dir}: is at {where}, not the pinned {lock.upstream.ref} ({pin}); nothing was changed", hint="apply into a new directory, or check out the pinned commit first")
    history.refuse_other_patches(repo, state, loaded)
    # Our trailers are not enough: a commit whose change is not exactly its patch's is the user's.
    history.refuse_user_work(repo, state, history.first_amended(repo, state, loaded.patches, loaded.patched_tree))
    # Those commits are exactly the series' now: where one ends a layer, its tree is what that
    # layer's lock must record (a patched_tree no repository has is refused here, exit 3).
    _refuse_lock_mismatches(loaded, [Step(p, gitcmd.tree_of(repo, a.commit)) for a, p in zip(state.applied, loaded.patches)])
    target.refuse_user_edits(repo, hint=EDITS_HINT)
    result.already = [a.name for a in state.applied]
    remaining = loaded.patches[len(state.applied):]
    head = state.head
    result.head = head
    if not remaining:
        return
    steps = _planned_steps(repo, loaded, remaining, gitcmd.tree_of(repo, head))
    result.applied = [s.patch.name for s in steps]
    if result.dry_run:
        return
    target.require_writable(repo, gitcmd.changed_paths(repo, gitcmd.tree_of(repo, head), steps[-1].tree))
    new_head = head
    for step in steps:
        new_head = history.commit_patch(repo, step.patch, step.tree, new_head, pin)
        interruption_point("commit-created")
    moves.move(repo, head, new_head, "apply")
    result.head = new_head
    if not result.created:  # a new target is done only once renamed into place
        _done(repo.working_tree_dir, new_head)


def _planned_steps(repo: gitcmd.Repo, loaded: LoadedSeries, patches: tuple[LoadedPatch, ...], base_tree: str) -> list[Step]:
    """The trees of `patches` applied on base_tree, each layer's last one checked against its lock."""
    steps = patch_trees(repo, base_tree, patches)
    _refuse_lock_mismatches(loaded, steps)
    return steps


def _refuse_lock_mismatches(loaded: LoadedSeries, steps: list[Step]) -> None:
    mismatches = lock_mismatches(loaded, steps)
    if mismatches:
        where, _, problem = mismatches[0].partition(": ")
        hint = loaded.overlay.lock_hint() if loaded.overlay and where == str(loaded.overlay.lock_path) else LOCK_HINT
        raise InvalidInput(where, problem, hint=hint)
