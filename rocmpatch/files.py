"""Replacing a file whole: a reader (or a process killed mid-write) sees the old content or the new, never half.

Every file rocmpatch writes inside a target's .git (journal, saved edits, lock) may sit next to
something planted there: a temporary name is created exclusively and never through a symlink.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def replace_file(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write `data` beside `path`, then rename it over `path` (atomic on POSIX).

    The temporary file gets a fresh random name, created with O_EXCL (mkstemp), so a file or
    symlink planted at a predictable name is never followed or overwritten; renaming over a
    symlink at `path` replaces the link, not its target.
    `durable` also syncs the data to disk first, for records that must survive a crash (the journal)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".rocmpatch-tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def create_new_file(path: Path, data: bytes) -> None:
    """Write a file that must not exist yet (O_EXCL | O_NOFOLLOW), synced to disk."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
    with os.fdopen(handle, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())


def open_lock_file(path: Path):
    """Open (creating it if needed) a lock file without following a symlink at its name."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    return os.fdopen(handle, "a+")

