"""Moving a target between commits: journaled, holding git's locks as git does, rolled back when
git cannot finish, recovered by the next command when the process dies.

A Move:
1. writes the journal (.git/rocmpatch/journal.json): where HEAD is and where it is going, which
   process moves it, and the identity (device, inode, mtime) of the lock file it is about to hold;
2. holds .git/index.lock itself (a file it made, hard-linked into place, so that the name never
   exists without its identity recorded; refused as BUSY when another git holds it), so no other git
   writes the index meanwhile, and lets its git work on a private index in .git/rocmpatch/,
   installed as .git/index once the working tree is done;
3. moves HEAD in one `git update-ref` transaction, recording the ref lock files git holds for it
   before git commits it;
4. drops the journal and its lock.

When git fails on the way (a full disk, a file the file system refuses), `move` rolls the working
tree, index and HEAD back to where they were and raises MoveFailed; if even that fails, the journal
stays. A process killed on the way (kill -9, Ctrl-C) leaves the journal: the next apply, unapply,
status or verify sees it, and `recover` (apply, unapply) removes the lock files the journal names
and only those (another git's lock is refused, never removed), then finishes the move, or rolls it
back when git cannot finish it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd, target
from rocmpatch.errors import NO_SPACE_HINT, Busy, EnvironmentProblem, MoveFailed, RocmpatchError, TargetRefused
from rocmpatch.files import NEARLY_FULL, NOFOLLOW, free_bytes, replace_file
from rocmpatch.processes import interruption_point
from rocmpatch.target import journal_path, pending

HOLDER_SUFFIX = ".rocmpatch-holder"  # .git/rocmpatch/index.lock.<pid>.rocmpatch-holder, linked to .git/index.lock


def lock_paths(repo: gitcmd.Repo) -> list[Path]:
    """The git lock files a move can leave: index.lock, HEAD.lock and the lock of the branch HEAD
    names (in the common git directory for a linked worktree), as git itself names them."""
    names = ["index.lock", "HEAD.lock"]
    try:
        head = (gitcmd.git_dir(repo) / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    if head.startswith("ref: refs/"):
        names.append(head[len("ref: "):] + ".lock")
    out = gitcmd.run(repo, "rev-parse", *[argument for name in names for argument in ("--git-path", name)])
    root = Path(repo.cwd)
    return [root / line for line in out.split("\n")]


def _identity(path: Path | str, *, info: os.stat_result | None = None) -> dict:
    """What tells this lock file from another one at the same name: its real path (the target may
    be named through a symlink another time), device, inode and mtime (never written after)."""
    info = info or os.lstat(path)
    return {"path": os.path.realpath(path), "device": info.st_dev, "inode": info.st_ino, "mtime_ns": info.st_mtime_ns}


class Move:
    """One journaled change of a target, holding .git/index.lock (see the module's docstring).
    Its steps raise what git or the file system raised; `move` and `recover` decide what follows."""

    def __init__(self, repo: gitcmd.Repo, operation: str, old_commit: str, new_commit: str) -> None:
        self.repo, self.operation, self.old, self.new = repo, operation, old_commit, new_commit
        self.git_dir, self.state = gitcmd.git_dir(repo), target.state_dir(repo)
        self.locks = lock_paths(repo)
        self.index, self.private_index = self.git_dir / "index", self.state / "index"
        self.record = {"operation": operation, "old": old_commit, "new": new_commit, "pid": os.getpid(),
                       "host": socket.gethostname(), "started": time.time(), "locks": []}
        self.held: Path | None = None

    def __enter__(self) -> "Move":
        self._hold_index()
        return self

    def __exit__(self, kind, exc, traceback) -> None:
        self._release()
        if kind is None:
            journal_path(self.repo).unlink(missing_ok=True)

    def _save(self) -> None:
        replace_file(journal_path(self.repo), json.dumps(self.record).encode("utf-8"), durable=True)

    def _hold_index(self) -> None:
        """.git/index.lock, made by us: first as a file of our own whose identity the journal
        records, then linked to git's name (which fails, like git's O_EXCL, when it exists)."""
        lock = self.locks[0]
        holder = self.state / f"index.lock.{os.getpid()}{HOLDER_SUFFIX}"
        holder.unlink(missing_ok=True)
        descriptor = os.open(holder, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        try:
            self.record["locks"] = [_identity(lock, info=os.fstat(descriptor))]
        finally:
            os.close(descriptor)
        try:
            self._save()
            interruption_point("journal-written")
            try:
                os.link(holder, lock)
            except FileExistsError:
                journal_path(self.repo).unlink(missing_ok=True)
                raise _foreign_lock(self.repo, lock) from None
            except OSError:  # a file system without hard links: created in place, then recorded
                descriptor = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
                os.close(descriptor)
                self.record["locks"] = [_identity(lock)]
                self._save()
        finally:
            holder.unlink(missing_ok=True)
        self.held = lock
        interruption_point("index-held")

    def _release(self) -> None:
        if self.held is not None:
            _remove_if_recorded(self.held, self.record["locks"])
            self.held = None
        for leftover in (self.private_index, self.state / "index.lock"):
            leftover.unlink(missing_ok=True)

    def _private_copy(self) -> None:
        """The repository's index, copied for git to work on (its mtime kept: git's check of
        entries written in the same second as the index stays as it was)."""
        self.private_index.unlink(missing_ok=True)
        (self.state / "index.lock").unlink(missing_ok=True)  # a killed git's, in our own directory
        if self.index.exists():
            shutil.copy2(self.index, self.private_index)

    def _install(self) -> None:
        os.replace(self.private_index, self.index)  # we hold index.lock: no git writes the index now

    def checkout(self, old_tree: str, new_tree: str) -> None:
        """Index and working tree from old_tree to new_tree (only the files that differ)."""
        self._private_copy()
        # Stat data brought up to date in the private copy (rocmpatch's git status writes none back
        # into .git/index): `read-tree -m` refuses an entry whose stat data changed, same content or not.
        gitcmd.refresh_index(self.repo, self.private_index)
        gitcmd.move_tree(self.repo, old_tree, new_tree, index=self.private_index)
        self._install()

    def reset(self, tree: str, *, rewrite: list[str] = ()) -> None:
        """Index and working tree exactly `tree`, overwriting what differs. `rewrite`: paths
        written again whatever their stat data says (files a failed move may have touched)."""
        self._private_copy()
        if rewrite and self.private_index.exists():
            gitcmd.run_bytes(self.repo, "update-index", "--force-remove", "-z", "--stdin",
                             stdin=b"".join(os.fsencode(path) + b"\0" for path in rewrite), env={"GIT_INDEX_FILE": str(self.private_index)})
        gitcmd.force_tree(self.repo, tree, index=self.private_index)
        self._install()

    def set_head(self, new_commit: str, old_commit: str | None) -> None:
        def record_ref_locks() -> None:  # git holds them now: ours until it commits
            held = [path for path in self.locks[1:] if os.path.lexists(path)]
            self.record["locks"] = self.record["locks"][:1] + [_identity(path) for path in held]
            self._save()

        gitcmd.update_ref_holding(self.repo, "HEAD", new_commit, old_commit, message=f"rocmpatch {self.operation}",
                                  while_locked=record_ref_locks)

    def roll_back(self, old_tree: str, new_tree: str) -> None:
        """Back to old_tree and the old commit: the files the move created are removed, those it
        changed or removed written again, the index and HEAD put back."""
        moving = gitcmd.changed_paths(self.repo, old_tree, new_tree)
        _remove_created(self.repo, gitcmd.list_tree(self.repo, old_tree), moving)
        self.reset(old_tree, rewrite=moving)
        if gitcmd.head_commit(self.repo) != self.old:
            self.set_head(self.old, None)


def move(repo: gitcmd.Repo, old_commit: str, new_commit: str, operation: str) -> None:
    """Move HEAD, index and working tree from old_commit to new_commit, journaled; rolled back
    (MoveFailed) when git cannot finish."""
    old_tree, new_tree = gitcmd.tree_of(repo, old_commit), gitcmd.tree_of(repo, new_commit)
    target.refuse_untracked_obstacles(repo, old_tree, new_tree)
    refuse_unwritable_names(Path(repo.working_tree_dir), gitcmd.changed_paths(repo, old_tree, new_tree))
    with Move(repo, operation, old_commit, new_commit) as step:
        try:
            step.checkout(old_tree, new_tree)
            interruption_point("worktree-updated")
            step.set_head(new_commit, old_commit)
        except (RocmpatchError, OSError) as cause:  # not Ctrl-C: the journal stays for the next command
            _roll_back(step, cause, old_tree, new_tree)


def _roll_back(step: Move, cause: BaseException, old_tree: str, new_tree: str) -> None:
    """After `cause` stopped a move: roll it back and raise MoveFailed saying so, or, when that
    fails too, keep the journal and raise MoveFailed saying the next command goes on."""
    where = step.repo.working_tree_dir
    try:
        step.roll_back(old_tree, new_tree)
    except (RocmpatchError, OSError) as again:
        raise MoveFailed(f"{where}: 'rocmpatch {step.operation}' failed part-way ({_line(cause)}) and could not be rolled back ({_line(again)}); "
                         "the journal is kept", hint="fix that, then rerun 'rocmpatch apply' or 'rocmpatch unapply': it finishes the change or rolls it back") from None
    journal_path(step.repo).unlink(missing_ok=True)
    full = _nearly_full(Path(where)) if "KiB free" not in _line(cause) else ""  # said once
    raise MoveFailed(f"{where}: 'rocmpatch {step.operation}' failed part-way ({_line(cause)}{full}); it was rolled back, the target is as it was",
                     hint=NO_SPACE_HINT if full or _no_space(cause) else "fix what git names, then rerun") from None


def _nearly_full(root: Path) -> str:
    """", its file system has N KiB free" when that is little (git does not always say ENOSPC)."""
    free = free_bytes(root)
    return f"; its file system has {free // 1024} KiB free" if free is not None and free < NEARLY_FULL else ""


def _line(exc: BaseException) -> str:
    if isinstance(exc, RocmpatchError):
        return exc.message
    if isinstance(exc, OSError):
        return f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}"
    return str(exc)


def _no_space(exc: BaseException) -> bool:
    import errno

    return isinstance(exc, EnvironmentProblem) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def _remove_created(repo: gitcmd.Repo, old_entries: dict, moving: list[str]) -> None:
    """Remove the files (not directories) a move created at paths the old tree lacks, then the
    directories that held only them. Called only where nothing else can be there: the move refused
    anything untracked at those paths, and recovery checked that what is there is the move's."""
    root = Path(repo.working_tree_dir)
    old_directories = {path.rsplit("/", 1)[0] for path in old_entries if "/" in path}
    old_directories |= {"/".join(d.split("/")[:n]) for d in list(old_directories) for n in range(1, d.count("/") + 1)}
    created = [path for path in moving if path not in old_entries]
    for path in created:
        full = root / path
        if os.path.islink(full) or os.path.isfile(full):
            full.unlink()
    parents = {"/".join(p.split("/")[:n]) for p in created for n in range(1, p.count("/") + 1)} - old_directories
    for directory in sorted(parents, key=lambda d: -d.count("/")):
        try:
            (root / directory).rmdir()
        except OSError:
            pass  # not empty (something else lives there) or already gone


def refuse_unwritable_names(root: Path, paths: list[str]) -> None:
    """TargetRefused, before anything changes, for a path the series writes that the file system
    under `root` cannot hold: a name longer than its NAME_MAX, a path longer than PATH_MAX."""
    name_max, path_max = target.path_limit(root, "PC_NAME_MAX", 255), target.path_limit(root, "PC_PATH_MAX", 4096)
    for path in paths:
        encoded = os.fsencode(path)
        longest = max(len(part) for part in encoded.split(b"/"))
        if longest > name_max or len(encoded) >= path_max:
            shown = path if len(path) <= 100 else f"{path[:48]}...{path[-48:]}"
            raise TargetRefused(f"{root}: the series writes {shown}, a name of {longest} bytes (the file system allows {name_max}) "
                                f"in a path of {len(encoded)} (it allows {path_max - 1}); nothing was changed",
                                hint="a patch names a path no checkout here can hold: fix the patch, or apply on a file system that allows it")


# --- after a process died mid-move -----------------------------------------------------------


@dataclass(frozen=True)
class Recovered:
    operation: str
    rolled_back: str | None = None  # why git could not finish it, when it was rolled back instead


def recover(repo: gitcmd.Repo) -> Recovered | None:
    """Finish an interrupted move, or roll it back when git cannot finish it; None when there was
    none. Only with the target's rocmpatch lock held.

    A killed `git read-tree -u` leaves each file it had to change old, new, missing, or new but
    cut short (git removes a file, then writes the new one from the start). All of those are
    the move's own doing and are finished; any other content is a user's edit, and is refused."""
    journal = pending(repo)
    if journal is None:
        return None
    release_recorded_locks(repo, journal)
    old, new, operation = journal["old"], journal["new"], journal["operation"]
    old_tree, new_tree = gitcmd.tree_of(repo, old), gitcmd.tree_of(repo, new)
    moving = set(gitcmd.changed_paths(repo, old_tree, new_tree))
    old_entries, new_entries = gitcmd.list_tree(repo, old_tree), gitcmd.list_tree(repo, new_tree)
    dirty = [path for _, path in target.user_changes(repo)]
    actual = gitcmd.worktree_entries(repo, dirty)
    for path in dirty:
        if path not in moving or not _left_by_move(repo, path, actual[path], old_entries.get(path), new_entries.get(path)):
            raise TargetRefused(
                f"{repo.working_tree_dir}: an interrupted 'rocmpatch {operation}' left changes, and {path} holds edits made since",
                hint=f"save or undo your edit of {path}, then rerun (or 'rocmpatch unapply --force' to save all edits as a patch)",
            )
    with Move(repo, operation, old, new) as step:
        try:
            step.reset(new_tree)
            step.set_head(new, None)
            return Recovered(operation)
        except (RocmpatchError, OSError) as cause:
            try:
                step.roll_back(old_tree, new_tree)
            except (RocmpatchError, OSError) as again:
                raise MoveFailed(f"{repo.working_tree_dir}: an interrupted 'rocmpatch {operation}' could neither be finished ({_line(cause)}) "
                                 f"nor rolled back ({_line(again)}); the journal is kept",
                                 hint="fix that, then rerun 'rocmpatch apply' or 'rocmpatch unapply'") from None
            return Recovered(operation, rolled_back=_line(cause))


def release_recorded_locks(repo: gitcmd.Repo, journal: dict) -> None:
    """Remove the git lock files the journal says a dead move held, and only those (the same
    file: device, inode and mtime); BUSY, changing nothing, when another one is there: a running
    git's, or one a git killed on its own left, which rocmpatch did not create."""
    records = journal.get("locks", [])
    candidates = lock_paths(repo)
    for path in candidates:
        _remove_if_recorded(path, records)
    for leftover in target.state_dir(repo).glob(f"*{HOLDER_SUFFIX}"):
        leftover.unlink(missing_ok=True)
    for name in ("index", "index.lock"):  # the private index of a killed move, and its git's lock
        (target.state_dir(repo) / name).unlink(missing_ok=True)
    for path in candidates:
        if os.path.lexists(path):
            raise _foreign_lock(repo, path)


def _remove_if_recorded(path: Path, records: list[dict]) -> bool:
    try:
        now = _identity(path)
    except OSError:
        return False
    if any(all(record.get(key) == value for key, value in now.items()) for record in records):
        path.unlink()
        return True
    return False


def _foreign_lock(repo: gitcmd.Repo, lock: Path) -> Busy:
    return Busy(f"{lock}: another git process is working in {repo.working_tree_dir}, or one was killed and left its lock; "
                "rocmpatch did not create it and leaves it alone; nothing was changed",
                hint=f"wait for that git to finish; if no git is running, remove {lock} and rerun")


def _left_by_move(repo: gitcmd.Repo, path: str, now: gitcmd.Entry | None, old: gitcmd.Entry | None, new: gitcmd.Entry | None) -> bool:
    if now is None:
        return True  # removed, not yet rewritten
    if any(e is not None and (e.mode, e.sha) == (now.mode, now.sha) for e in (old, new)):
        return True
    if new is None or now.mode not in (0o100644, 0o100755) or new.mode not in (0o100644, 0o100755):
        return False
    written = (Path(repo.working_tree_dir) / path).read_bytes()
    return gitcmd.read_blob(repo, new.sha).startswith(written)  # cut short while being written
