"""Replacing a file whole: a reader (or a process killed mid-write) sees the old content or the new, never half."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def replace_file(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write `data` beside `path`, then rename it over `path` (atomic on POSIX).

    `durable` also syncs the data to disk first, for records that must survive a crash (the journal)."""
    temporary = path.with_name(f".{path.name}.rocmpatch-tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temporary, path)


MAX_TEXT_FILE = 4 * 1024 * 1024  # series.yaml, upstream.lock
MAX_PATCH_FILE = 64 * 1024 * 1024


def read_regular_file(path: Path, *, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InvalidInput for anything else.

    A FIFO, a device (/dev/zero), a directory or a socket is refused before reading, so a bad
    path never hangs or exhausts memory."""
    from rocmpatch.errors import InvalidInput

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InvalidInput(path, f"{what} not found") from None
    except IsADirectoryError:
        raise InvalidInput(path, f"is a directory, not a {what}") from None
    except PermissionError:
        raise InvalidInput(path, f"cannot read the {what} (permission denied)") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInput(path, f"is a directory, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(path, f"is not a regular file (a FIFO, device or socket); expected a {what}")
        if info.st_size > limit:
            raise InvalidInput(path, f"is {info.st_size} bytes, more than the {limit} a {what} may have")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(descriptor, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise InvalidInput(path, f"is more than the {limit} bytes a {what} may have")
    return data
