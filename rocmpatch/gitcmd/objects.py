"""Git objects read and written straight from the object database: blobs, trees and their
entries, without an index or a working tree."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rocmpatch.files import naming
from rocmpatch.gitcmd.core import Repo, read_object, run_bytes

SYMLINK_MODE = 0o120000
GITLINK_MODE = 0o160000
REGULAR_MODE = 0o100644


@dataclass(frozen=True)
class Entry:
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
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_object(repo: Repo, kind: str, data: bytes) -> str:
    """Store a loose object, in this process (a `git hash-object -w` per blob costs a process
    each): zlib-compressed into a temporary file beside its place, made read-only, renamed there."""
    header = f"{kind} {len(data)}\0".encode("ascii")
    digest = hashlib.sha1(header)
    digest.update(data)
    sha = digest.hexdigest()
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

    Uses a temporary index file, so neither the repository's index nor any working tree changes.
    A changed file keeps its mode in base_tree; a new one gets modes[path] or 100644.
    """
    modes = modes or {}
    existing = list_tree(repo, base_tree) if changes else {}
    records = []
    for path, data in changes.items():
        if data is None:
            records.append(f"0 {'0' * 40}\t{path}")  # mode 0 removes the entry
        else:
            mode = existing[path].mode if path in existing else modes.get(path, REGULAR_MODE)
            records.append(f"{mode:o} {write_blob(repo, data)}\t{path}")
    with tempfile.TemporaryDirectory(prefix="rocmpatch-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_bytes(repo, "read-tree", base_tree, env=env)
        if records:
            stdin = "".join(r + "\0" for r in records).encode("utf-8", "surrogateescape")
            run_bytes(repo, "update-index", "-z", "--index-info", stdin=stdin, env=env)
        return run_bytes(repo, "write-tree", env=env).decode().strip()


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
