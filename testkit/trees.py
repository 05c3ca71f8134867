"""Helpers every release's series tests share (each release's own harness lives in its folder):
patches applied to a {path: bytes} mapping, such as a wheel's files, and a tree written to disk."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rocmpatch.patching import ChangedFiles, Patch, Reader, apply_patch


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


def apply_series(patches: list[Patch], read: Reader) -> dict[str, bytes | None]:
    """Apply patches in order; return the combined changes relative to `read`."""
    files = ChangedFiles(read)
    for patch in patches:
        files.update(apply_patch(patch, files.read))
    return files.changes


def files_under(patch: Patch, prefixes: tuple[str, ...]) -> Patch:
    """The part of `patch` that touches only paths under `prefixes` (tests against partial trees)."""
    kept = tuple(f for f in patch.files if all(p.startswith(prefixes) for p in f.paths))
    return Patch(patch.name, patch.source, kept)


def read_from_mapping(files: Mapping[str, bytes]) -> Reader:
    return files.get
