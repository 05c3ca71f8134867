"""Replacing a file whole: a reader (or a process killed mid-write) sees the old content or the new, never half."""

from __future__ import annotations

import os
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
