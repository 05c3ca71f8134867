"""`rocmpatch unapply`: back to the pristine pinned commit, never losing the user's edits."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, target
from rocmpatch.error_handler import mark_done
from rocmpatch.errors import TargetRefused
from rocmpatch.series import LoadedSeries


@dataclass
class UnapplyResult:
    target: Path
    removed: list[str] = field(default_factory=list)  # patch names taken off
    saved_edits: Path | None = None
    recovered: str | None = None


def unapply(loaded: LoadedSeries, directory: Path, *, force: bool = False) -> UnapplyResult:
    lock = loaded.require_lock()  # a stale lock still names the pin; that is all we need
    gitcmd.require_git()
    repo = target.open_target(directory)
    result = UnapplyResult(directory)
    target.require_writable(repo)
    with target.locked(repo):
        if not force:
            result.recovered = target.recover(repo)
        pin = lock.upstream.commit
        state = history.read(repo, pin)
        history.refuse_user_commits(repo, state)
        if state.base != pin:
            raise TargetRefused(f"{directory}: is at {state.base or 'no commit'}, not the pinned {lock.upstream.ref} ({pin}) plus patches; nothing was changed",
                                hint="unapply only undoes what 'rocmpatch apply' did")
        result.removed = [a.name for a in reversed(state.applied)]
        if state.head != pin:
            target.require_writable(repo, gitcmd.changed_paths(repo, gitcmd.tree_of(repo, state.head), gitcmd.tree_of(repo, pin)))
        dirty = gitcmd.dirty_paths(repo)
        if dirty and not force:
            target.refuse_user_edits(repo, hint="run 'rocmpatch unapply --force' to save them as a patch file first")
        if dirty:
            result.saved_edits = _save_edits(repo, state.head)
            _discard_edits(repo, state.head, dirty)
        if state.head != pin:
            target.move(repo, state.head, pin, "unapply")
        mark_done(f"{directory} is at the pristine pinned commit")
    return result


def _save_edits(repo, head: str) -> Path:
    """The user's uncommitted changes (untracked files too) as a patch `git apply` takes back."""
    snapshot = gitcmd.worktree_tree(repo)
    text = gitcmd.diff_trees(repo, gitcmd.tree_of(repo, head), snapshot)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = target.state_dir(repo) / f"saved-edits-{stamp}.patch"
    with open(path, "wb") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def _discard_edits(repo, head: str, dirty: list[tuple[str, str]]) -> None:
    """Only after _save_edits: reset to HEAD, and remove the files git does not track."""
    gitcmd.force_tree(repo, gitcmd.tree_of(repo, head))
    root = Path(repo.working_tree_dir)
    for code, path in dirty:
        if code == "??":
            (root / path).unlink(missing_ok=True)
