"""A target checkout: where it is, its lock, its journal, what in it is the user's, and a new one
made from the cache. Moving it between commits (journaled, rolled back, recovered) is moves.py."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

from rocmpatch import gitcmd
from rocmpatch.errors import TargetRefused, UsageError, shown
from rocmpatch.files import file_lock
from rocmpatch.processes import interruption_point

LOCK_WAIT_VARIABLE = "ROCMPATCH_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 5.0


# Room a checkout needs below its top (Megatron's deepest paths, .git's own) and beside it (apply
# builds a new target as `.NAME.<pid>.<random>.rocmpatch-partial` in the same directory).
TREE_ROOM = 512
BUILD_NAME_ROOM = 40


def usable_target(text: str) -> Path:
    """--target as every command takes it, or UsageError before anything is created: not empty
    (which would be the current directory), `~` expanded (as by the shell: `--target=~/x` is not
    expanded there), `a/../b` read as `b` (as git reads it, whether or not `a` exists), and not a
    symlink that leads nowhere (dangling, or a loop); see refuse_unusable_path for the rest."""
    if not text:
        raise UsageError("--target '': an empty path (an unset variable?); nothing was done",
                         hint="give the checkout's directory, e.g. --target ./Megatron-LM")
    directory = Path(os.path.normpath(os.path.expanduser(text)))
    refuse_unusable_path(directory)
    if os.path.islink(directory) and not os.path.exists(directory):
        raise UsageError(f"--target {shown(directory)}: a symlink that leads nowhere (dangling, or a loop); nothing was done",
                         hint="give the checkout's directory itself, or fix the link")
    return directory


def refuse_unusable_path(directory: Path) -> None:
    """UsageError, before anything is created, for a --target no checkout can live at: a line break
    in it (git's own listings and the tools around it are line based; such a checkout would be
    made, then refused by every later command), or a path so long that git could not write the
    tree's files below it."""
    text = os.fsencode(os.path.abspath(directory))
    if b"\n" in text or b"\r" in text:
        raise UsageError(f"--target {str(directory)!r}: the path holds a line break; nothing was done",
                         hint="choose a directory whose path has no line break")
    existing = Path(os.path.abspath(directory))
    while not os.path.isdir(existing) and existing != existing.parent:  # False for a name too long, too
        existing = existing.parent
    path_max, name_max = path_limit(existing, "PC_PATH_MAX", 4096), path_limit(existing, "PC_NAME_MAX", 255)
    names = text.rstrip(b"/").split(b"/")
    if len(text) + TREE_ROOM > path_max or max(map(len, names)) > name_max or len(names[-1]) + BUILD_NAME_ROOM > name_max:
        decoded = text.decode("utf-8", "surrogateescape")
        abridged = decoded if len(decoded) <= 100 else f"{decoded[:48]}...{decoded[-48:]}"
        raise UsageError(f"--target {abridged}: the path is too long ({len(text)} bytes, its last name {len(names[-1])}); "
                         f"a checkout needs a path under {path_max - TREE_ROOM} bytes and a last name under "
                         f"{name_max - BUILD_NAME_ROOM}; nothing was done", hint="choose a shorter path")


def path_limit(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


APPLY_MAKES = "apply makes a new checkout in a directory that does not exist yet (or is empty)"


def open_target(directory: Path, *, creating: bool = False) -> gitcmd.Repo:
    """The target checkout at `directory`: a git repository with a working tree, given by its top.
    Otherwise one refusal saying what the path is (not_a_checkout); `creating`: apply's hints."""
    try:
        repo = gitcmd.open_repo(directory)
    except gitcmd.NotARepository:
        raise not_a_checkout(directory, creating=creating) from None
    if repo.bare or repo.working_tree_dir is None:
        raise TargetRefused(f"{directory}: is a bare git repository (it has no working tree)", hint="give a checkout made by 'rocmpatch apply', or a directory that does not exist yet")
    return repo


def enclosing_top(path: Path) -> Path | None:
    """The top of the working tree `path` lies below (the nearest parent holding a .git), or None."""
    for parent in Path(os.path.abspath(path)).parents:
        if os.path.lexists(parent / ".git"):
            return parent
    return None


def not_a_checkout(directory: Path, *, creating: bool = False, needs: str | None = None) -> TargetRefused:
    """What `directory` is, given as a target that is no checkout's top (or, with `needs`, has no
    such file): missing, a file, inside a checkout (naming its top), or a directory that is none.
    `creating`: for apply, which makes a checkout where nothing is yet."""
    named = shown(directory)
    if not os.path.lexists(directory):
        return TargetRefused(f"{named}: does not exist", hint="give the checkout `rocmpatch apply --target DIR` made (apply creates it)")
    if not os.path.isdir(directory):
        kind = "a file" if os.path.isfile(directory) else "not a directory"
        return TargetRefused(f"{named}: is {kind}, not a checkout's directory",
                             hint=APPLY_MAKES if creating else "give the checkout's directory")
    top = enclosing_top(directory)
    if needs and (top is None or not (top / needs).is_file()):
        return TargetRefused(f"{named}: has no {needs}, so it is no Megatron-LM tree",
                             hint="give the checkout `rocmpatch apply --target DIR` made")
    if top is not None:
        fix = f"give --target {shown(top)}"
        return TargetRefused(f"{named}: is inside the checkout {shown(top)}, not its top",
                             hint=f"{fix}; or, for a new checkout, {APPLY_MAKES}" if creating else fix)
    return TargetRefused(f"{named}: is a directory but no git checkout",
                         hint=f"{APPLY_MAKES}: give one, e.g. --target {shown(directory / 'Megatron-LM')}" if creating
                         else "give the checkout `rocmpatch apply --target DIR` made")


def require_tree(directory: Path, needs: str) -> None:
    """TargetRefused, saying what `directory` is, unless it holds the file `needs` (a Megatron-LM
    tree for smoke, recipe launch and data prepare: git or not)."""
    if not (directory / needs).is_file():
        raise not_a_checkout(directory, needs=needs)


def require_writable(repo: gitcmd.Repo, paths: Iterable[str] = ()) -> None:
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


def state_dir(repo: gitcmd.Repo) -> Path:
    path = gitcmd.git_dir(repo) / "rocmpatch"
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise TargetRefused(f"{path}: is a symlink or not a directory; rocmpatch keeps its state there and writes nothing through it",
                            hint=f"remove {path} (rocmpatch recreates it)")
    path.mkdir(exist_ok=True)
    return path


def journal_path(repo: gitcmd.Repo) -> Path:
    return state_dir(repo) / "journal.json"


@contextlib.contextmanager
def locked(repo: gitcmd.Repo) -> Iterator[None]:
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


def user_changes(repo: gitcmd.Repo) -> list[tuple[str, str]]:
    """(status, path) of every change since HEAD: what `git status` lists, and the edits it cannot
    see (files marked assume-unchanged, or skip-worktree ones that are there), as " M"."""
    dirty = gitcmd.dirty_paths(repo)
    listed = {path for _, path in dirty}
    return dirty + [(" M", path) for path in gitcmd.hidden_edits(repo) if path not in listed]


def refuse_user_edits(repo: gitcmd.Repo, *, hint: str) -> None:
    dirty = user_changes(repo)
    if dirty:
        edits = [path for code, path in dirty if code != "??"]
        new = [path for code, path in dirty if code == "??"]
        parts = [f"edits ({_some(edits)})"] if edits else []
        if new:  # data, checkpoints, logs: not edits, but they would be lost or packed into a patch
            parts.append(f"files git does not track ({_some(new)}; data, checkpoints and logs belong outside "
                         "the tree; ignored build products are fine)")
        raise TargetRefused(f"{repo.working_tree_dir}: has uncommitted changes: {'; '.join(parts)}; "
                            "nothing was changed", hint=hint)


def _some(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def refuse_untracked_obstacles(repo: gitcmd.Repo, old_tree: str, new_tree: str) -> None:
    """A path the move creates must not exist yet: git would silently overwrite an ignored file
    there (untracked ones that are not ignored are caught earlier as uncommitted changes)."""
    old_entries, new_entries = gitcmd.list_tree(repo, old_tree), gitcmd.list_tree(repo, new_tree)
    root = Path(repo.working_tree_dir)
    for path in sorted(new_entries.keys() - old_entries.keys()):
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            prefix = "/".join(parts[:end])
            full = root / prefix
            if prefix in old_entries or not os.path.lexists(full):
                continue
            if end == len(parts) or full.is_symlink() or not full.is_dir():
                raise TargetRefused(
                    f"{repo.working_tree_dir}: {prefix} is not tracked by git (ignored?), and the series creates {path}; nothing was changed",
                    hint=f"move {prefix} out of the way (it would be overwritten), then rerun",
                )


def pending(repo: gitcmd.Repo) -> dict | None:
    """The interrupted operation, if any."""
    path = gitcmd.git_dir(repo) / "rocmpatch" / "journal.json"
    if not path.exists():
        return None
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
        if not all(isinstance(journal.get(key), str) for key in ("operation", "old", "new")):
            raise ValueError("missing keys")
        locks = journal.setdefault("locks", [])  # none in a journal of an older rocmpatch
        if not isinstance(locks, list) or not all(isinstance(lock, dict) for lock in locks):
            raise ValueError("locks is not a list of lock records")
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise TargetRefused(f"{path}: not a journal rocmpatch wrote ({exc})", hint=f"delete {path}, then check the target with 'git status'") from None
    return journal


def materialize(directory: Path, cache: gitcmd.Repo, commit: str, upstream_url: str, *, message: str = "rocmpatch: the pinned upstream commit") -> gitcmd.Repo:
    """A fresh checkout of `commit` (the pin, or the pin plus the series kept in the cache) in
    directory, with the cache entry's objects: shallow at the pin, like the cache."""
    # The lock's url becomes remote.upstream.url: as strict as --upstream-url, even when a warm
    # cache means it is never fetched from.
    gitcmd.check_url(upstream_url, source="upstream.lock url")
    repo = gitcmd.init_repo(directory)
    gitcmd.copy_objects(cache, repo)
    interruption_point("objects-copied")
    gitcmd.update_ref(repo, "HEAD", commit, message=message)
    gitcmd.force_tree(repo, gitcmd.tree_of(repo, commit))
    gitcmd.run(repo, "remote", "add", "--", "upstream", upstream_url)
    return repo
