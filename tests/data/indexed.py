"""Megatron's .bin/.idx pair written here in its layout (rocmpatch/data/idx.py describes it), for
tests that need data without a tree: the reader's own tests and the launch checks."""

from __future__ import annotations

import struct
from pathlib import Path

from rocmpatch.data.idx import MAGIC


def write_index(path: Path, lengths: list[int], *, code=8, version=1, magic=MAGIC) -> Path:
    """An index of one document per sequence of `lengths` tokens (uint16 by default)."""
    pointers = [2 * sum(lengths[:i]) for i in range(len(lengths))]
    path.write_bytes(magic + struct.pack("<QBQQ", version, code, len(lengths), len(lengths) + 1)
                     + struct.pack(f"<{len(lengths)}i", *lengths) + struct.pack(f"<{len(lengths)}q", *pointers)
                     + struct.pack(f"<{len(lengths) + 1}q", *range(len(lengths) + 1)))
    return path


def write_pair(prefix: Path, documents: int, tokens: int = 64) -> str:
    """PREFIX.bin and PREFIX.idx holding `documents` documents of `tokens` uint16 tokens; the prefix."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    write_index(Path(f"{prefix}.idx"), [tokens] * documents)
    Path(f"{prefix}.bin").write_bytes(b"\0\0" * tokens * documents)
    return str(prefix)
