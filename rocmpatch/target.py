"""A target checkout: its lock, its journal, and moving it safely between commits.

Every change to a target goes through `move`: the new commits already exist as objects, a
journal in .git/rocmpatch/ records where HEAD was and where it is going, then index and working
tree are updated and HEAD moves, then the journal goes. If the process dies in between (Ctrl-C,
a kill), the next apply, unapply, status or verify finds the journal and `recover` finishes the
move, after checking that every changed file holds either the old or the new content (so a
user's later edit is never overwritten).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Iterable, Iterator

import git

from rocmpatch import gitcmd
from rocmpatch.errors import TargetRefused, UsageError
from rocmpatch.files import replace_file
from rocmpatch.store import file_lock

LOCK_WAIT_VARIABLE = "ROCMPATCH_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 5.0
INTERRUPT_VARIABLE = "ROCMPATCH_TEST_INTERRUPT_AT"  # tests: send ourselves SIGINT at a named point


def open_target(directory: Path) -> git.Repo:
    """The target checkout at `directory`: a git repository with a working tree, given by its top."""
    repo = gitcmd.open_repo(directory)
    if repo.bare or repo.working_tree_dir is None:
        raise TargetRefused(f"{directory}: is a bare git repository (it has no working tree)", hint="give a checkout made by 'rocmpatch apply', or a directory that does not exist yet")
    return repo


def require_writable(repo: git.Repo, paths: Iterable[str] = ()) -> None:
    """TargetRefused, before anything changes, when the checkout (its top, its .git, or a
    directory holding one of `paths`) may not be written."""
    root = Path(repo.working_tree_dir)
    git_directory = gitcmd.git_dir(repo)
    places = [root, git_directory, git_directory / "objects", git_directory / "refs"]
    for path in paths:
        parent = (root / path).parent
        while not parent.exists() and parent != root:
            parent = parent.parent
        places.append(parent)
    for place in dict.fromkeys(places):
        if place.exists() and not os.access(place, os.W_OK):
            raise TargetRefused(f"{place}: not writable, so {root} cannot be changed; nothing was changed",
                                hint="make the checkout writable (chmod -R u+w) or run as its owner")


def state_dir(repo: git.Repo) -> Path:
    path = gitcmd.git_dir(repo) / "rocmpatch"
    path.mkdir(exist_ok=True)
    return path


def journal_path(repo: git.Repo) -> Path:
    return state_dir(repo) / "journal.json"


@contextlib.contextmanager
def locked(repo: git.Repo) -> Iterator[None]:
    """One rocmpatch process per target: a second waits a little, then exits BUSY."""
    wait = lock_wait()
    with file_lock(state_dir(repo) / "lock", wait=wait, what=f"the target {repo.working_tree_dir}"):
        yield


def lock_wait() -> float:
    """Seconds to wait for another process's lock on the target: ROCMPATCH_LOCK_WAIT, default 5."""
    text = os.environ.get(LOCK_WAIT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value < float("inf")):
        raise UsageError(f"{LOCK_WAIT_VARIABLE}={text!r}: expected a number of seconds, such as 5 or 0.5", hint=f"unset {LOCK_WAIT_VARIABLE} for the default of {DEFAULT_LOCK_WAIT:g}")
    return value


def interruption_point(name: str) -> None:
    """A no-op unless a test asked to be interrupted here (a real SIGINT, as from Ctrl-C)."""
    if os.environ.get(INTERRUPT_VARIABLE) == name:
        os.kill(os.getpid(), signal.SIGINT)


def refuse_user_edits(repo: git.Repo, *, hint: str) -> None:
    dirty = gitcmd.dirty_paths(repo)
    if dirty:
        edits = [path for code, path in dirty if code != "??"]
        new = [path for code, path in dirty if code == "??"]
        parts = [f"edits ({_some(edits)})"] if edits else []
        if new:  # data, checkpoints, logs: not edits, but they would be lost or packed into a patch
            parts.append(f"files git does not track ({_some(new)}; data, checkpoints and logs belong outside "
                         "the tree or in .git/info/exclude; ignored build products are fine)")
        raise TargetRefused(f"{repo.working_tree_dir}: has uncommitted changes: {'; '.join(parts)}; "
                            "nothing was changed", hint=hint)


def _some(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def move(repo: git.Repo, old_commit: str, new_commit: str, operation: str) -> None:
    """Move HEAD, index and working tree from old_commit to new_commit, journaled."""
    journal = journal_path(repo)
    replace_file(journal, json.dumps({"operation": operation, "old": old_commit, "new": new_commit}).encode("utf-8"), durable=True)
    interruption_point("journal-written")
    gitcmd.move_tree(repo, gitcmd.tree_of(repo, old_commit), gitcmd.tree_of(repo, new_commit))
    interruption_point("worktree-updated")
    gitcmd.update_ref(repo, "HEAD", new_commit, old_commit, message=f"rocmpatch {operation}")
    journal.unlink()


def pending(repo: git.Repo) -> dict | None:
    """The interrupted operation, if any."""
    path = gitcmd.git_dir(repo) / "rocmpatch" / "journal.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def recover(repo: git.Repo) -> str | None:
    """Finish an interrupted move; return its operation name, or None when there was none."""
    journal = pending(repo)
    if journal is None:
        return None
    old, new = journal["old"], journal["new"]
    old_tree, new_tree = gitcmd.tree_of(repo, old), gitcmd.tree_of(repo, new)
    moving = set(gitcmd.changed_paths(repo, old_tree, new_tree))
    old_entries, new_entries = gitcmd.list_tree(repo, old_tree), gitcmd.list_tree(repo, new_tree)
    dirty = [path for _, path in gitcmd.dirty_paths(repo)]
    if dirty:
        actual = gitcmd.hash_files(repo, dirty)
        for path in dirty:
            known = {_sha(old_entries, path), _sha(new_entries, path)}
            if path not in moving or actual[path] not in known:
                raise TargetRefused(
                    f"{repo.working_tree_dir}: an interrupted 'rocmpatch {journal['operation']}' left changes, and {path} holds edits made since",
                    hint=f"save or undo your edit of {path}, then rerun",
                )
    gitcmd.force_tree(repo, new_tree)
    gitcmd.update_ref(repo, "HEAD", new, message=f"rocmpatch {journal['operation']} (recovered)")
    journal_path(repo).unlink()
    return journal["operation"]


def _sha(entries: dict[str, gitcmd.Entry], path: str) -> str | None:
    entry = entries.get(path)
    return entry.sha if entry else None


def materialize(directory: Path, cache: git.Repo, commit: str, upstream_url: str) -> git.Repo:
    """A fresh checkout of `commit` in directory, fetched shallowly from the local cache."""
    gitcmd.check_url(upstream_url, source="upstream.lock url")  # it becomes the checkout's remote
    repo = gitcmd.init_repo(directory)
    gitcmd.fetch_commit(repo, str(gitcmd.git_dir(cache)), commit, depth=1)
    gitcmd.update_ref(repo, "HEAD", commit, message="rocmpatch: the pinned upstream commit")
    gitcmd.force_tree(repo, gitcmd.tree_of(repo, commit))
    gitcmd.run(repo, "remote", "add", "--", "upstream", upstream_url)
    return repo
