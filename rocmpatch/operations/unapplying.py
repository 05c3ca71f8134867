"""`rocmpatch unapply`: back to the pristine pinned commit, never losing the user's edits."""

from __future__ import annotations

import datetime
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, moves, target
from rocmpatch.console import note
from rocmpatch.interrupts import mark_done
from rocmpatch.errors import MoveFailed, RocmpatchError, TargetRefused
from rocmpatch.files import create_new_file
from rocmpatch.series import LoadedSeries


@dataclass
class UnapplyResult:
    target: Path
    removed: list[str] = field(default_factory=list)  # patch names taken off
    saved_edits: Path | None = None
    recovered: moves.Recovered | None = None
    kept: list[str] = field(default_factory=list)  # nested git repositories left in place
    saved_commits: list[str] = field(default_factory=list)  # the user's commits (oldest first) saved in saved_edits
    abandoned: str | None = None  # an interrupted operation --force rolled back (its journal removed)


def unapply(loaded: LoadedSeries, directory: Path, *, force: bool = False) -> UnapplyResult:
    lock = loaded.require_lock()  # a stale lock still names the pin; that is all we need
    loaded.refuse_stale_overlay_lock()  # but an overlay's commits are told from the user's edits by its lock
    gitcmd.require_git()
    repo = target.open_target(directory)
    result = UnapplyResult(directory)
    target.require_writable(repo)
    with target.locked(repo):
        try:
            result.recovered = moves.recover(repo)
        except TargetRefused:
            journal = target.pending(repo)
            if not force or journal is None:
                raise
            # Edits on top of an interrupted move: saved below with the rest, then discarded,
            # which rolls the move back to HEAD; the journal goes with it.
            result.abandoned = journal["operation"]
        pin = lock.upstream.commit
        state = history.read(repo, pin)
        if state.base != pin:
            raise TargetRefused(f"{directory}: is at {state.base or 'no commit'}, not the pinned {lock.upstream.ref} ({pin}) plus patches; nothing was changed",
                                hint="unapply only undoes what 'rocmpatch apply' did")
        # An overlay's commits are checked against its patches like the release's: without the
        # overlay they cannot be, and an edit amended into one would be lost.
        history.refuse_unchecked_overlay(repo, state, loaded)
        # The user's too: commits on top of the series, and edits amended into its commits.
        amended = history.first_amended(repo, state, loaded.patches, loaded.patched_tree)
        if not force:
            history.refuse_user_work(repo, state, amended)
        result.removed = [a.name for a in reversed(state.applied)]
        result.saved_commits = [*([amended.commit] if amended else []), *reversed(state.user_commits)]
        if state.head != pin:  # before anything is discarded
            target.require_writable(repo, gitcmd.changed_paths(repo, gitcmd.tree_of(repo, state.head), gitcmd.tree_of(repo, pin)))
            target.refuse_untracked_obstacles(repo, gitcmd.tree_of(repo, state.head), gitcmd.tree_of(repo, pin))
        dirty = target.user_changes(repo)
        if dirty and not force:
            target.refuse_user_edits(repo, hint="run 'rocmpatch unapply --force' to save them as a patch file first")
        if dirty or result.saved_commits:
            result.kept = [path.rstrip("/") for code, path in dirty if code == "??" and _is_nested_repo(repo, path)]
            # Relative to what the series gives for the patches applied: the user's commits and
            # amendments are in it too, so nothing of theirs is lost when HEAD goes to the pin.
            baseline = history.series_tree(repo, state, loaded.patches, amended)
            result.saved_edits = _save_edits(repo, baseline, result.kept, _saved_commits_header(repo, state, amended))
            note(f"saved your {'commits and ' if result.saved_commits else ''}uncommitted edits to {result.saved_edits}")
        if dirty:
            _discard_and_move(repo, state.head, pin, dirty, result.kept)
        elif state.head != pin:
            moves.move(repo, state.head, pin, "unapply")
        target.journal_path(repo).unlink(missing_ok=True)  # an abandoned move's, when nothing was left to do
        mark_done(f"{directory} is at the pristine pinned commit")
    return result


def _is_nested_repo(repo, path: str) -> bool:
    full = Path(repo.working_tree_dir) / path
    return full.is_dir() and not full.is_symlink() and os.path.lexists(full / ".git")


def _save_edits(repo, baseline_tree: str, nested: list[str], header: bytes = b"") -> Path:
    """The working tree's difference from `baseline_tree` (the series' tree: uncommitted changes,
    untracked files, and the user's commits when HEAD holds some) as a patch `git apply` takes back.

    Nested git repositories are left out (a patch can only hold a gitlink for them); they stay."""
    snapshot = gitcmd.worktree_tree(repo, leave_out=nested)
    text = gitcmd.diff_trees(repo, baseline_tree, snapshot)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = target.state_dir(repo) / f"saved-edits-{stamp}.patch"
    create_new_file(path, header + text)
    return path


def _saved_commits_header(repo, state: history.History, amended) -> bytes:
    """What the patch holds besides uncommitted edits, as lines `git apply` skips (text before the
    first diff; indented, so none reads as a diff header). Empty when there is nothing else."""
    lines = [f"    commit {commit[:12]} {gitcmd.commit_info(repo, commit).subject}" for commit in reversed(state.user_commits)]
    if amended is not None:
        lines.insert(0, f"    commit {amended.commit[:12]} of patch {amended.name}, amended: {', '.join(amended.paths)}")
    if not lines:
        return b""
    text = ("Saved by 'rocmpatch unapply --force': your changes relative to the series' own tree, from these commits\n"
            "(they stay in git's reflog too) and any uncommitted edits:\n" + "\n".join(lines) + "\n\n")
    return text.encode("utf-8", "surrogateescape")


def _discard_and_move(repo, head: str, pin: str, dirty: list[tuple[str, str]], nested: list[str]) -> None:
    """Only after _save_edits: the working tree and index exactly the pin's (the edits and, with
    them, whatever an abandoned move left are overwritten), the files git does not track removed
    (never a nested repository, nor anything through a symlink), HEAD at the pin. Journaled like a
    move; there is nothing to roll back to (the edits are in the saved patch), so a failure keeps
    the journal and the next unapply --force goes on."""
    root = Path(repo.working_tree_dir)
    with moves.Move(repo, "unapply", head, pin) as step:
        try:
            step.reset(gitcmd.tree_of(repo, pin))
            for code, path in dirty:
                full = root / path
                if code != "??" or path.rstrip("/") in nested:
                    continue
                if full.is_dir() and not full.is_symlink():
                    shutil.rmtree(full)
                else:
                    full.unlink(missing_ok=True)
            step.set_head(pin, None)
        except (RocmpatchError, OSError) as cause:
            raise MoveFailed(f"{root}: 'rocmpatch unapply --force' failed part-way ({cause}); your edits are in the saved patch, "
                             "the journal is kept", hint="fix that, then rerun 'rocmpatch unapply --force'") from None
