"""Trees for the smoke tests that tests/series does not build: a patched tree with one patch taken out."""

from __future__ import annotations

import shutil
from pathlib import Path

from rocmpatch.patching import apply_patch, parse_patch
from rocmpatch.schema import load_series


def without_patch(tree: Path, patchsets: Path, name: str, dest: Path) -> Path:
    """A copy of the fully patched `tree` with patch `name` reversed: the series minus that patch."""
    series = load_series(patchsets)
    entry = next(e for e in series.entries if e.name == name)
    text = series.patch_path(entry).read_bytes().decode("utf-8", "surrogateescape")
    patch = parse_patch(text, name=name, source=entry.file).reversed()
    shutil.copytree(tree, dest, ignore=shutil.ignore_patterns("__pycache__", "*.so"))

    def read(path: str) -> bytes | None:
        return (dest / path).read_bytes() if (dest / path).is_file() else None

    for path, data in apply_patch(patch, read).items():
        if data is None:
            (dest / path).unlink()
        else:
            (dest / path).write_bytes(data)
    return dest
