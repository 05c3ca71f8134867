"""The .idx reader against indexes written here in Megatron's layout (the full-tree test reads the
tree's own)."""

from __future__ import annotations

import pytest

from rocmpatch.data.idx import check_pair, read_index
from rocmpatch.errors import InvalidInput
from tests.data.indexed import write_index


def test_counts_documents_and_tokens(tmp_path):
    summary = read_index(write_index(tmp_path / "d.idx", [3, 5, 7]))
    assert (summary.dtype, summary.sequences, summary.documents, summary.tokens) == ("uint16", 3, 3, 15)


def test_the_bin_must_hold_what_the_index_counts(tmp_path):
    idx = write_index(tmp_path / "d.idx", [3, 5])
    (tmp_path / "d.bin").write_bytes(b"\0" * 16)
    assert check_pair(tmp_path / "d.bin", idx).tokens == 8
    (tmp_path / "d.bin").write_bytes(b"\0" * 15)
    with pytest.raises(InvalidInput, match="15 bytes, but its index counts 8 uint16 tokens"):
        check_pair(tmp_path / "d.bin", idx)


@pytest.mark.parametrize("kwargs, problem", [
    ({"magic": b"NOTANIDX\0"}, "not a Megatron index"),
    ({"version": 2}, "index version 2"),
    ({"code": 42}, "unknown dtype code 42"),
])
def test_what_is_not_an_index_is_named(tmp_path, kwargs, problem):
    with pytest.raises(InvalidInput, match=problem):
        read_index(write_index(tmp_path / "d.idx", [1], **kwargs))


def test_a_truncated_index(tmp_path):
    path = write_index(tmp_path / "d.idx", [1, 2, 3])
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(InvalidInput, match="truncated: 3 sequence lengths announced, 1 present"):
        read_index(path)
