"""rocmpatch's own stat cache of a target: for each file, the blob id rocmpatch hashed from its
bytes, and the stat data (size, mtime, ctime, inode, device, mode) the file had then.

It lets verify skip reading a file whose stat data is unchanged, as git's index does for
`git status`, without trusting anything the target holds: the target's index can be rewritten by
whoever writes the target, this cache cannot. It lives in the user's cache directory
(`$ROCMPATCH_CACHE_DIR/worktrees/`, one file per target, named by the device and inode of the
target's top directory), is written only by `rocmpatch apply` (verify only reads it), and is
trusted only when owned by the user and writable by no one else. Whoever writes the target cannot
make a file match a recorded entry: any write or chmod moves the file's ctime, which cannot be set
back; a new file has a new ctime (and usually inode).

Racy entries are not trusted, as in git: a file whose mtime or ctime is not older than the moment
hashing started (read from the target's own file-system clock: a file created in .git/rocmpatch
just before) could have changed again within the same clock tick; verify hashes it every time.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from rocmpatch import gitcmd, store
from rocmpatch.console import note
from rocmpatch.files import replace_file
from rocmpatch.snapshot import Recorded, Snapshot, ignored_by_git, take

MAGIC = b"rocmpatch stat cache 1\n"
KEEP = 64  # targets remembered; the oldest files beyond that are removed


def directory() -> Path:
    return store.cache_dir() / "worktrees"


def path_for(root: Path) -> Path | None:
    try:
        info = os.stat(root)
    except OSError:
        return None
    return directory() / f"{info.st_dev:x}-{info.st_ino:x}.stat"


def recorded(root: Path) -> bool:
    path = path_for(root)
    return path is not None and path.is_file()


def load(root: Path) -> Recorded | None:
    """The stat cache recorded for the target at root, or None (none, unreadable, malformed, or
    not trustworthy: then every file is hashed, and the last case is said on stderr)."""
    path = path_for(root)
    if path is None:
        return None
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info, folder = os.fstat(handle), os.lstat(path.parent)
        if not _private(info) or not _private(folder):
            note(f"{path}: not owned by you, or writable by others: not used (verify hashes every file)")
            return None
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = stream.read()
    except OSError:
        return None
    finally:
        os.close(handle)
    try:
        return _parse(data)
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _parse(data: bytes) -> Recorded:
    if not data.startswith(MAGIC):
        raise ValueError("not a stat cache")
    document = json.loads(data[len(MAGIC):])
    files = {}
    for path, (mode, sha, size, mtime, ctime, ino, dev) in document["entries"].items():
        files[path] = (None if size < 0 else (mode, size, mtime, ctime, ino, dev), mode, sha)
    tree = document.get("tree")
    return Recorded(files, tree if isinstance(tree, str) else None)


def refresh(repo: gitcmd.Repo, expected_tree: str, *, final_root: Path | None = None,
            check: Callable[[Snapshot], None] | None = None) -> Snapshot:
    """Hash the target's working tree (files the stat cache proves unchanged are not read again)
    and, once `check` (if given) accepted it, record what was found for the next verify; return
    the snapshot. `final_root`: where the target will be once renamed (its top directory keeps its
    inode, which names the record)."""
    root = Path(repo.working_tree_dir)
    old = load(root)
    guide = old.files if old is not None and old.tree == expected_tree else gitcmd.list_tree(repo, expected_tree)
    started = _file_system_now(repo)
    snapshot = take(root, guide, ignored_by_git(repo), cached=old)
    if check is not None:
        check(snapshot)
    _save(root, final_root or root, snapshot, started)
    return snapshot


def _file_system_now(repo: gitcmd.Repo) -> int | None:
    """The target file system's clock now (a file's mtime is stamped by it, not by ours)."""
    from rocmpatch.target import state_dir

    try:
        handle, name = tempfile.mkstemp(prefix=".clock.", suffix=".rocmpatch-tmp", dir=state_dir(repo))
    except OSError:
        return None
    try:
        return os.fstat(handle).st_mtime_ns
    finally:
        os.close(handle)
        os.unlink(name)


def _save(root: Path, final_root: Path, snapshot: Snapshot, started: int | None) -> None:
    path = path_for(root)
    if path is None or started is None:
        return
    entries = {}
    for name, entry in snapshot.entries.items():
        if not entry.sha:
            continue
        found = snapshot.stats.get(name)
        if found is None or max(found[2], found[3]) >= started:
            entries[name] = [entry.mode, entry.sha, -1, 0, 0, 0, 0]  # racy (or a symlink): verify reads it
        else:
            entries[name] = [entry.mode, entry.sha, *found[1:]]
    document = {"root": str(final_root), "tree": snapshot.tree, "entries": entries}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_file(path, MAGIC + json.dumps(document, separators=(",", ":")).encode("ascii"))
        os.chmod(path, 0o600)
        _forget_old(path.parent)
    except OSError as exc:
        note(f"{path.parent}: cannot record the stat cache ({exc.strerror}): verify will read every file of {final_root}")


def _forget_old(folder: Path) -> None:
    kept = []
    for item in folder.glob("*.stat"):
        try:
            kept.append((item.lstat().st_mtime_ns, item))
        except OSError:
            pass
    for _, item in sorted(kept, reverse=True)[KEEP:]:
        item.unlink(missing_ok=True)

