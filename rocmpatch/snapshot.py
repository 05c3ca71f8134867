"""The working tree as rocmpatch reads it itself: every file's blob id hashed here from its bytes
(or taken from rocmpatch's own stat cache, see statcache.py, where the file's stat data proves it
unchanged since rocmpatch hashed it), and the git tree id those entries make, computed here.

Nothing of the target's own git state goes into it: not its index (entries, flags, cache-tree),
attributes (eol, text, filters), replace refs, sparse-checkout or case settings. git is asked one
thing only, and only about files that are not in the expected tree: which of them its ignore
rules exclude (`check-ignore --no-index`, case-sensitive); a `.gitignore` that is not in the
expected tree never hides anything, itself included.

`guide` is the expected tree's paths (a listing; only its keys count). It decides which files are asked about (the others are
compared whatever the ignore rules say) and which directories need not be walked (an untracked
directory the rules ignore). It is only a guide: a tree id equal to the lock's means the entries
kept are exactly that tree, whatever the guide said.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from rocmpatch import gitcmd
from rocmpatch.gitcmd import GITLINK_MODE, SYMLINK_MODE, Entry

EXECUTABLE_MODE, REGULAR_MODE = 0o100755, 0o100644
# What Python may import or run from a directory on its path: sources, bytecode (a
# __pycache__/*.pyc is run instead of its source when its header matches), extension modules, .pth.
IMPORTABLE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".pyd", ".pth")
_CHUNK = 1 << 22  # files larger than this are hashed in pieces
_PARALLEL_FROM = 64  # files to hash before a thread pool pays off (hashlib and reads release the GIL)


# The stat data that proves a file unchanged since it was hashed: (git mode, size, mtime_ns,
# ctime_ns, inode, device). ctime cannot be set back by a user, and any write or chmod moves it.
FileStat = tuple


def file_stat(info: os.stat_result) -> FileStat:
    return (_git_mode(info.st_mode) or 0, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


@dataclass
class Snapshot:
    root: Path
    entries: dict[str, Entry] = field(default_factory=dict)  # what git would record; sha "" = not hashed
    links: dict[str, str] = field(default_factory=dict)  # symlink path -> its target
    stats: dict[str, FileStat] = field(default_factory=dict)  # regular files hashed or cached, as found
    hashed: int = 0  # files read and hashed (the others came from the stat cache)
    unreadable: list[str] = field(default_factory=list)  # files and directories that could not be read
    importable_ignored: list[str] = field(default_factory=list)  # with strict: ignored files Python could import
    trees: set[str] = field(default_factory=set)  # the ids of the tree and its subtrees
    # The tree id of the entries; None when one was not hashed (an untracked file, a nested
    # repository): then it is not the expected tree, whatever that is.
    tree: str | None = None


Ignored = Callable[[list[str]], set[str]]  # of these untracked paths, those git's ignore rules exclude


@dataclass
class Recorded:
    """What rocmpatch's stat cache holds (see statcache.py): per path, the stat data the file had
    when rocmpatch hashed it (None: racy, or a symlink, never trusted) and its mode and blob id;
    and the tree id all of them made."""

    files: dict[str, tuple[FileStat | None, int, str]]
    tree: str | None


def take(root: Path, guide: Mapping[str, object], ignored: Ignored, *, cached: Recorded | None = None, strict: bool = False) -> Snapshot:
    """The working tree under root (its top-level .git left out), read and hashed here."""
    snapshot = Snapshot(root)
    top = str(root)
    guide_dirs = _directories(guide)
    files: list[tuple[str, os.DirEntry]] = []
    untracked_files: list[str] = []
    untracked_dirs: list[str] = []
    nested: list[str] = []

    def walk(start: str, *, pruned: bool) -> None:
        stack = [start]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(f"{top}/{directory}" if directory else top) as listing:
                    found = list(listing)
            except OSError:
                snapshot.unreadable.append(directory)
                continue
            prefix = f"{directory}/" if directory else ""
            marks = len(stack), len(files), len(untracked_files), len(untracked_dirs)
            for item in found:
                name = item.name
                if name == ".git":
                    if directory:  # a nested repository: git records a gitlink, never its files
                        del stack[marks[0]:], files[marks[1]:], untracked_files[marks[2]:], untracked_dirs[marks[3]:]
                        nested.append(directory)
                        break
                    continue
                path = prefix + name
                try:
                    is_dir = item.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if not pruned or path in guide_dirs:
                        stack.append(path)
                    else:
                        untracked_dirs.append(path)
                elif not pruned or path in guide:
                    files.append((path, item))
                else:
                    untracked_files.append(path)

    walk("", pruned=True)
    # Untracked paths: left out when ignored; a directory the rules do not ignore is walked whole
    # and its files asked about in turn. A .gitignore of our own finding hides nothing.
    rules_ignore = ignored([p for p in (*untracked_files, *untracked_dirs, *nested) if not _is_gitignore(p)])
    kept_dirs = [d for d in untracked_dirs if d not in rules_ignore]
    ignored_dirs = [d for d in (*untracked_dirs, *nested) if d in rules_ignore]
    untracked = [f for f in untracked_files if f not in rules_ignore]
    ignored_files = [f for f in untracked_files if f in rules_ignore]
    if kept_dirs:
        inner_start = len(files)
        for directory in kept_dirs:
            walk(directory, pruned=False)
        inner_items = files[inner_start:]
        inner = [path for path, _ in inner_items]
        del files[inner_start:]
        nested_inside = [n for n in nested if any(n.startswith(d + "/") for d in kept_dirs)]
        rules_inner = ignored([p for p in (*inner, *nested_inside) if not _is_gitignore(p)])
        untracked += [p for p in inner if p not in rules_inner]
        ignored_files += [p for p in inner if p in rules_inner]
        ignored_dirs += [n for n in nested_inside if n in rules_inner]
    nested = [n for n in dict.fromkeys(nested) if n not in ignored_dirs]
    for path in untracked:
        full = root / path
        try:
            info = os.lstat(full)
        except OSError:
            continue  # gone meanwhile
        mode = _git_mode(info.st_mode)
        if mode is not None:
            snapshot.entries[path] = Entry(mode, "")  # not in the expected tree: no need to hash it
    for path in nested:
        snapshot.entries[path] = Entry(GITLINK_MODE, "")
    matched = _hash(snapshot, files, cached)
    if strict:
        snapshot.importable_ignored = sorted(_importable(root, ignored_files, ignored_dirs))
    if cached is not None and cached.tree and matched == len(cached.files) == len(snapshot.entries) and not snapshot.unreadable:
        snapshot.tree = cached.tree  # every entry is one the recorded tree was made of
    else:
        snapshot.tree = tree_id(snapshot.entries, snapshot.trees)
    return snapshot


def _is_gitignore(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == ".gitignore"


def _directories(listing: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for path in listing:
        end = path.rfind("/")
        while end > 0:
            parent = path[:end]
            if parent in found:
                break
            found.add(parent)
            end = parent.rfind("/")
    return found


def _git_mode(st_mode: int) -> int | None:
    if stat.S_ISREG(st_mode):
        return EXECUTABLE_MODE if st_mode & stat.S_IXUSR else REGULAR_MODE
    if stat.S_ISLNK(st_mode):
        return SYMLINK_MODE
    return None  # git records nothing else (FIFOs, sockets, devices)


def _hash(snapshot: Snapshot, files: list[tuple[str, os.DirEntry]], cached: Recorded | None) -> int:
    """Fill snapshot.entries for these files: symlinks from their target, regular files from the
    stat cache when their stat data matches it, else from their bytes. Returns how many entries
    are the very (mode, id) the stat cache recorded."""
    recorded = cached.files if cached is not None else {}
    entries, stats = snapshot.entries, snapshot.stats
    to_read: list[tuple[str, str, os.stat_result]] = []
    matched = 0
    for path, item in files:
        try:
            info = item.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            snapshot.unreadable.append(path)
            continue
        if stat.S_ISREG(info.st_mode):
            found = file_stat(info)
            known = recorded.get(path)
            if known is not None and known[0] == found:
                entries[path] = Entry(known[1], known[2])
                stats[path] = found
                matched += 1
            else:
                to_read.append((path, item.path, info))
        elif stat.S_ISLNK(info.st_mode):
            try:
                target = os.readlink(item.path)
            except OSError:
                snapshot.unreadable.append(path)
                continue
            snapshot.links[path] = target
            entry = entries[path] = Entry(SYMLINK_MODE, gitcmd.blob_id(os.fsencode(target)))
            known = recorded.get(path)
            matched += known is not None and (known[1], known[2]) == entry
    if len(to_read) >= _PARALLEL_FROM and (os.cpu_count() or 1) > 1:
        from concurrent.futures import ThreadPoolExecutor  # imported only when it pays: ~10 ms

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            results = list(pool.map(lambda item: _read_and_hash(item[1], item[2]), to_read, chunksize=32))
    else:
        results = [_read_and_hash(full, info) for _, full, info in to_read]
    for (path, _, info), (sha, after) in zip(to_read, results):
        if sha is None:
            snapshot.unreadable.append(path)
            continue
        snapshot.hashed += 1
        entry = entries[path] = Entry(_git_mode(after.st_mode) or REGULAR_MODE, sha)
        known = recorded.get(path)
        matched += known is not None and (known[1], known[2]) == entry
        found = file_stat(after)
        if found == file_stat(info):  # unchanged while read: its stat data stands for these bytes
            stats[path] = found
    return matched


def file_blob_id(path: str) -> str | None:
    """The blob id of the regular file at `path`, symlinks followed (as Python opens a module);
    None when it is no regular file or cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _read_and_hash(path, info, follow=True)[0]


def _read_and_hash(full: str, before: os.stat_result, *, follow: bool = False) -> tuple[str | None, os.stat_result]:
    """The blob id of the file's bytes and its stat data once read (None when it cannot be read)."""
    try:
        handle = os.open(full, os.O_RDONLY | (0 if follow else os.O_NOFOLLOW) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None, before
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return None, before
        if info.st_size <= _CHUNK:
            return gitcmd.blob_id(_read_all(handle, info.st_size)), os.fstat(handle)
        # Large: hashed in pieces, with the length from the header checked at the end.
        digest, size = hashlib.sha1(b"blob %d\0" % info.st_size), 0
        while chunk := os.read(handle, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
        after = os.fstat(handle)
        if size != info.st_size:
            return _read_and_hash(full, after, follow=follow)  # it changed size while read: once more
        return digest.hexdigest(), after
    except OSError:
        return None, before
    finally:
        os.close(handle)


def _read_all(handle: int, size: int) -> bytes:
    chunks = [os.read(handle, size + 1)]
    while chunks[-1]:
        chunks.append(os.read(handle, _CHUNK))
    return b"".join(chunks)


def tree_id(entries: Mapping[str, Entry], trees: set[str] | None = None) -> str | None:
    """The git tree id of these entries (computed here, as git would write the tree), or None when
    an entry has no id. `trees` collects the ids of the tree and every subtree."""
    trees = trees if trees is not None else set()
    children: dict[str, list[tuple[bytes, bytes]]] = {"": []}  # directory -> (sort key, record)
    for path, entry in entries.items():
        if not entry.sha:
            return None
        directory, _, name = path.rpartition("/")
        raw = name.encode("utf-8", "surrogateescape")
        records = children.get(directory)
        if records is None:
            records = children[directory] = []
            while directory:  # make every parent known, so it gets a record for this directory
                parent = directory.rpartition("/")[0]
                if parent in children:
                    break
                children[parent] = []
                directory = parent
        records.append((raw, b"%o %s\0%s" % (entry.mode, raw, bytes.fromhex(entry.sha))))
    written: dict[str, bytes] = {}
    for directory in sorted(children, key=lambda d: -d.count("/") if d else 1):  # deepest first, the top last
        records = children[directory]
        if directory in entries:
            return None  # a file and a directory of one name
        records.sort(key=lambda record: record[0])
        tree = gitcmd.object_id("tree", b"".join(record for _, record in records))
        trees.add(tree)
        sha = written[directory] = bytes.fromhex(tree)
        if directory:
            parent, _, name = directory.rpartition("/")
            raw = name.encode("utf-8", "surrogateescape")
            children[parent].append((raw + b"/", b"40000 %s\0%s" % (raw, sha)))
    return written[""].hex()


def _importable(root: Path, files: list[str], directories: list[str]) -> list[str]:
    """Of these ignored files, and everything inside these ignored directories (nested
    repositories' own .git left out), what Python could import: see IMPORTABLE_SUFFIXES; a
    symlink too (it can put any file or package in the tree)."""
    found = [path for path in files if _importable_name(root, path)]
    for directory in directories:
        stack = [directory]
        while stack:
            current = stack.pop()
            try:
                with os.scandir(root / current) as listing:
                    items = list(listing)
            except OSError:
                continue
            for item in items:
                path = f"{current}/{item.name}"
                if item.name == ".git":
                    continue
                if item.is_dir(follow_symlinks=False):
                    stack.append(path)
                elif _importable_name(root, path):
                    found.append(path)
    return found


def _importable_name(root: Path, path: str) -> bool:
    return path.endswith(IMPORTABLE_SUFFIXES) or os.path.islink(root / path)


def ignored_by_git(repo: gitcmd.Repo) -> Ignored:
    return lambda paths: gitcmd.ignored_paths(repo, paths)
