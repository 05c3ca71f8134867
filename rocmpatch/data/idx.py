"""Megatron's .idx index of a .bin token file, read here (no numpy, nothing of Megatron imported).

The layout, as megatron/core/datasets/indexed_dataset.py writes it in every release: the magic
b"MMIDIDX\\x00\\x00", a version (<Q, 1), a dtype code (<B), the sequence count (<Q), the document
count (<Q: one more than the documents, the first index is 0), then one int32 length per sequence
(tokens), one int64 byte offset per sequence and the int64 document indices.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput

MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<QBQQ")
# Megatron's DType codes: numpy type name and bytes per token.
DTYPES = {1: ("uint8", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8),
          6: ("float64", 8), 7: ("float32", 4), 8: ("uint16", 2)}


@dataclass(frozen=True)
class IndexSummary:
    dtype: str
    token_bytes: int
    sequences: int
    documents: int
    tokens: int


def read_index(path: Path) -> IndexSummary:
    """The counts an .idx file records; InvalidInput naming the file when it is not one."""
    with open(path, "rb") as stream:
        magic = stream.read(len(MAGIC))
        if magic != MAGIC:
            raise InvalidInput(path, f"not a Megatron index: it starts with {magic!r}, not {MAGIC!r}")
        header = stream.read(_HEADER.size)
        if len(header) != _HEADER.size:
            raise InvalidInput(path, "truncated: the header is incomplete")
        version, code, sequences, document_indices = _HEADER.unpack(header)
        if version != 1:
            raise InvalidInput(path, f"index version {version}; this reader knows version 1")
        if code not in DTYPES:
            raise InvalidInput(path, f"unknown dtype code {code}")
        lengths = array("i")
        data = stream.read(4 * sequences)
        if len(data) != 4 * sequences:
            raise InvalidInput(path, f"truncated: {sequences} sequence lengths announced, {len(data) // 4} present")
        lengths.frombytes(data)
    if sys.byteorder == "big":
        lengths.byteswap()
    name, size = DTYPES[code]
    return IndexSummary(name, size, sequences, max(document_indices - 1, 0), sum(lengths))


def check_pair(bin_path: Path, idx_path: Path) -> IndexSummary:
    """The index's counts, checked against the size of its .bin (tokens x bytes per token)."""
    summary = read_index(idx_path)
    expected = summary.tokens * summary.token_bytes
    actual = bin_path.stat().st_size
    if actual != expected:
        raise InvalidInput(bin_path, f"{actual} bytes, but its index counts {summary.tokens} {summary.dtype} tokens ({expected} bytes)")
    return summary
