"""Git objects read and written straight from the object database: blobs, trees and their
entries, without an index or a working tree."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import zlib
from pathlib import Path
from typing import Iterable, NamedTuple

from rocmpatch.files import naming
from rocmpatch.gitcmd.core import Repo, read_object, run_bytes

SYMLINK_MODE = 0o120000
GITLINK_MODE = 0o160000
REGULAR_MODE = 0o100644


class Entry(NamedTuple):
    """A tree entry: mode and object id (a tuple: thousands are made per tree, cheaply)."""

    mode: int
    sha: str


class TreeReader:
    """Files of one git tree, read straight from the object database (no working tree)."""

    def __init__(self, repo: Repo, treeish: str) -> None:
        self.repo = repo
        tree = repo.read_object(f"{treeish}^{{tree}}")  # a commit's tree, or the tree itself
        self.tree = tree[0] if tree else treeish
        self._entries: dict[str, Entry] | None = None

    @property
    def entries(self) -> dict[str, Entry]:
        if self._entries is None:
            self._entries = list_tree(self.repo, self.tree)
        return self._entries

    def read(self, path: str) -> bytes | None:
        entry = self.entries.get(path)
        if entry is None or entry.mode in (SYMLINK_MODE, GITLINK_MODE):
            return None
        return read_blob(self.repo, entry.sha)

    def symlink_on_path(self, path: str) -> str | None:
        """The first symlink among `path` and its parent directories, if any."""
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            prefix = "/".join(parts[:end])
            entry = self.entries.get(prefix)
            if entry is not None and entry.mode == SYMLINK_MODE:
                return prefix
        return None


def list_tree(repo: Repo, tree: str) -> dict[str, Entry]:
    return _ls_tree(repo, tree)


def read_blob(repo: Repo, sha: str) -> bytes:
    return read_object(repo, sha)[2]


def write_blob(repo: Repo, data: bytes) -> str:
    return write_object(repo, "blob", data)


def blob_id(data: bytes) -> str:
    """The id git gives `data` as a blob, computed here (nothing is written)."""
    return object_id("blob", data)


def object_id(kind: str, data: bytes) -> str:
    """The id git gives an object of this kind (blob, tree, ...) and content: the sha1 of a
    "<kind> <size>\\0" header and the content (the content is not copied)."""
    digest = hashlib.sha1(b"%s %d\0" % (kind.encode("ascii"), len(data)))
    digest.update(data)
    return digest.hexdigest()


def write_object(repo: Repo, kind: str, data: bytes) -> str:
    """Store a loose object, in this process (a `git hash-object -w` per blob costs a process
    each): zlib-compressed into a temporary file beside its place, made read-only, renamed there."""
    header = f"{kind} {len(data)}\0".encode("ascii")
    sha = object_id(kind, data)
    directory = os.path.join(repo.objects_dir, sha[:2])
    path = os.path.join(directory, sha[2:])
    if os.path.exists(path):
        return sha
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix="tmp_obj_", dir=directory)  # git's name: gc removes strays
    try:
        with naming(path), os.fdopen(handle, "wb") as out:
            compressor = zlib.compressobj(zlib.Z_BEST_SPEED)
            out.write(compressor.compress(header))
            out.write(compressor.compress(data))
            out.write(compressor.flush())
        os.chmod(temporary, 0o444)
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return sha


def write_tree(repo: Repo, base_tree: str, changes: dict[str, bytes | None], modes: dict[str, int] | None = None) -> str:
    """A new tree: base_tree with `changes` ({path: bytes, or None to delete}) written over it.

    Computed and stored here (write_object), only the trees on the changed paths: neither an index
    nor a working tree is involved, and no git process "freshens" (touches) the objects it finds in
    a repository this one borrows from, so a scratch repository over a target or the cache leaves
    both exactly as they were. A changed file keeps its mode in base_tree; a new one gets
    modes[path] or 100644; a directory left empty disappears.
    """
    modes = modes or {}
    files: dict[str, dict[str, bytes | None]] = {"": {}}  # directory -> {name: bytes or None}
    for path, data in changes.items():
        directory, _, name = path.rpartition("/")
        files.setdefault(directory, {})[name] = data
        while directory:
            directory = directory.rpartition("/")[0]
            files.setdefault(directory, {})
    base = _TreeWalk(repo, base_tree)
    written: dict[str, str | None] = {}
    for directory in sorted(files, key=lambda d: -d.count("/") if d else 1):  # deepest first, the top last
        entries = base.entries(directory)
        for name, data in files[directory].items():
            if data is None:
                entries.pop(name, None)
                continue
            old = entries.get(name)
            path = f"{directory}/{name}" if directory else name
            mode = old[0] if old is not None and old[0] != _TREE_MODE else modes.get(path, REGULAR_MODE)
            entries[name] = (mode, write_blob(repo, data))
        prefix = f"{directory}/" if directory else ""
        for child, sha in written.items():
            if child.startswith(prefix) and "/" not in child[len(prefix):] and child != directory:
                name = child[len(prefix):]
                if sha is None:
                    entries.pop(name, None)
                else:
                    entries[name] = (_TREE_MODE, sha)
        written[directory] = _write_tree_object(repo, entries) if entries or not directory else None
    return written[""]


_TREE_MODE = 0o40000


class _TreeWalk:
    """The entries of a tree's directories, read one tree object at a time (cat-file --batch)."""

    def __init__(self, repo: Repo, tree: str) -> None:
        self.repo, self.tree = repo, tree
        self._ids: dict[str, str | None] = {"": tree}
        self._parsed: dict[str, dict[str, tuple[int, str]]] = {}

    def entries(self, directory: str) -> dict[str, tuple[int, str]]:
        """A copy: the caller may change it."""
        if directory not in self._parsed:
            sha = self._id(directory)
            found = self.repo.read_object(sha) if sha is not None else None
            self._parsed[directory] = parse_tree(found[2]) if found is not None and found[1] == "tree" else {}
        return dict(self._parsed[directory])

    def _id(self, directory: str) -> str | None:
        if directory not in self._ids:
            parent, _, name = directory.rpartition("/")
            entry = self.entries(parent).get(name) if self._id(parent) else None
            self._ids[directory] = entry[1] if entry is not None and entry[0] == _TREE_MODE else None
        return self._ids[directory]


def parse_tree(data: bytes) -> dict[str, tuple[int, str]]:
    """{name: (mode, id)} of a tree object's content."""
    entries, index = {}, 0
    while index < len(data):
        space = data.index(b" ", index)
        end = data.index(b"\0", space)
        entries[data[space + 1:end].decode("utf-8", "surrogateescape")] = (int(data[index:space], 8), data[end + 1:end + 21].hex())
        index = end + 21
    return entries


def _write_tree_object(repo: Repo, entries: dict[str, tuple[int, str]]) -> str:
    records = []
    for name, (mode, sha) in entries.items():
        raw = name.encode("utf-8", "surrogateescape")
        records.append((raw + b"/" if mode == _TREE_MODE else raw, b"%o %s\0%s" % (mode, raw, bytes.fromhex(sha))))
    records.sort(key=lambda record: record[0])
    return write_object(repo, "tree", b"".join(record for _, record in records))


def export_tree(repo: Repo, tree: str, directory: Path) -> int:
    """Write `tree`'s files into the empty `directory`, from the object database (no filters, no
    attributes, no working tree): regular files with their executable bit, symlinks as symlinks;
    a submodule is left out (it has no content here). Returns the files written."""
    written = 0
    for path, entry in sorted(list_tree(repo, tree).items()):
        if entry.mode == GITLINK_MODE:
            continue
        full = directory.joinpath(*path.split("/"))
        full.parent.mkdir(parents=True, exist_ok=True)
        data = read_blob(repo, entry.sha)
        if entry.mode == SYMLINK_MODE:
            os.symlink(os.fsdecode(data), full)
        else:
            full.write_bytes(data)
            full.chmod(0o755 if entry.mode & 0o111 else 0o644)
        written += 1
    return written


def paths_at(repo: Repo, commit: str, paths: Iterable[str]) -> dict[str, Entry]:
    """The entries of `paths` (files only, missing ones left out) in commit's tree."""
    return _ls_tree(repo, commit, "--", *paths)


def _ls_tree(repo: Repo, treeish: str, *limit: str) -> dict[str, Entry]:
    return parse_entries(run_bytes(repo, "ls-tree", "-r", "-z", "--full-tree", treeish, *limit), sha_field=2)


def parse_entries(out: bytes, *, sha_field: int) -> dict[str, Entry]:
    """{path: Entry} from NUL-separated "<meta>\\t<path>" records, as `ls-tree -z` ("mode type sha",
    sha_field 2) and `ls-files -s -z` ("mode sha stage", sha_field 1) write them."""
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        if record:
            meta, path = record.split(b"\t", 1)
            fields = meta.split(b" ")
            entries[path.decode("utf-8", "surrogateescape")] = Entry(int(fields[0], 8), fields[sha_field].decode())
    return entries


def has_object(repo: Repo, sha: str) -> bool:
    """Whether the object with this (hex) id is in repo, packed or loose."""
    return re.fullmatch(r"[0-9a-fA-F]+", sha) is not None and repo.read_object(sha) is not None


def objects_not_matching_ids(repo: Repo, *, skip: set[str] = frozenset()) -> list[tuple[str, str]]:
    """(id, type) of each object in repo, packed or loose, whose content as git reads it does not
    hash to its id; `skip`: ids already checked another way. git does not check this when it
    reads an object (checkout writes a swapped blob's content as it is)."""
    listing = run_bytes(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    bad = []
    for line in listing.decode("ascii").splitlines():
        sha = line.split(" ", 1)[0]
        if sha in skip:
            continue
        _, kind, data = read_object(repo, sha)
        if object_id(kind, data) != sha:
            bad.append((sha, kind))
    return bad
