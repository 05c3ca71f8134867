"""Helpers every release's series tests share (each release's own harness lives in its folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping


def write_files(dest: Path, files: Mapping[str, bytes | None], executable: frozenset[str] = frozenset()) -> Path:
    """A tree of files on disk (None: deleted by the series, not written)."""
    for path, data in files.items():
        if data is None:
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if path in executable:
            target.chmod(0o755)
    return dest
