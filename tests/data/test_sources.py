"""Where documents come from: text files, JSON lines (.gz, a JSON array), parquet, directories; and
the file and line named when something is not a document."""

from __future__ import annotations

import gzip
import json

import pytest

from rocmpatch.data import sources
from rocmpatch.errors import InvalidInput, UsageError


def texts(inputs, **kwargs):
    plan = sources.plan(inputs, **kwargs)
    return [text for source in plan.sources for text in sources.documents(source, plan.text_key)]


def test_a_directory_is_read_recursively_in_sorted_order_and_other_files_are_counted(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.md").write_text("two")
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "three"}) + "\n\n" + json.dumps({"text": "four"}) + "\n")
    (tmp_path / "notes.csv").write_text("x,y\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.txt").write_text("no")
    plan = sources.plan([tmp_path])
    assert [s.path.name for s in plan.sources] == ["a.txt", "two.md", "c.jsonl"]
    assert sorted(p.name for p in plan.skipped) == ["notes.csv", "secret.txt"]
    assert texts([tmp_path]) == ["one", "two", "three", "four"]


def test_gzip_and_a_json_array_and_another_key(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"body": "zipped"}\n'))
    (tmp_path / "b.json").write_text(json.dumps([{"body": "first"}, {"body": "second"}], indent=1))
    assert texts([tmp_path / "a.jsonl.gz", tmp_path / "b.json"], text_key="body") == ["zipped", "first", "second"]


@pytest.mark.parametrize("name, content, where, problem", [
    ("bad.jsonl", b'{"text": "ok"}\n{"text": \n', "bad.jsonl:2", "not JSON"),
    ("key.jsonl", b'{"body": "x"}\n', "key.jsonl:1", "no key 'text' (keys: body)"),
    ("list.jsonl", b'["x"]\n', "list.jsonl:1", "a JSON list, not an object"),
    ("number.jsonl", b'{"text": 3}\n', "number.jsonl:1", "'text' is a JSON int, not a string"),
    ("latin1.txt", "caf\u00e9".encode("latin-1"), "latin1.txt", "not UTF-8 text (byte 3"),
    ("zip.jsonl.gz", b"not gzip", "zip.jsonl.gz", "not gzip data"),
])
def test_what_is_not_a_document_is_named_with_its_line(tmp_path, name, content, where, problem):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InvalidInput) as error:
        texts([tmp_path / name])
    assert error.value.where == str(tmp_path / where) and problem in error.value.message


def test_paths_and_types_are_checked_before_reading(tmp_path):
    with pytest.raises(UsageError, match="no such file or directory"):
        sources.plan([tmp_path / "missing.txt"])
    (tmp_path / "data.csv").write_text("x")
    with pytest.raises(InvalidInput, match="not a document file this command reads"):
        sources.plan([tmp_path / "data.csv"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="no document file inside"):
        sources.plan([tmp_path / "empty"])


def test_parquet_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["a parquet row", None, "another"]}), tmp_path / "rows.parquet")
    assert texts([tmp_path / "rows.parquet"], text_key="content") == ["a parquet row", "", "another"]
    with pytest.raises(InvalidInput, match=r"no column 'text' \(columns: content\)"):
        sources.plan([tmp_path / "rows.parquet"])
