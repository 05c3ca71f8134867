"""rocmpatch.yamlio: each reader's errors name the file, the line and the key path; hostile input
(huge numbers, booleans where numbers belong) is refused at once."""

from __future__ import annotations

import re
import time

import pytest

from rocmpatch import yamlio as y
from rocmpatch.errors import InvalidInput

SCHEMA = y.Mapping({
    "name": y.Line("a short name"),
    "kind": y.Enum(("dense", "moe")),
    "layers": y.Integer("the number of layers", minimum=1, maximum=1024),
    "fast": y.Optional(y.Bool("whether to take the fast path"), False),
    "tags": y.Optional(y.Strings("tag", pattern=re.compile(r"[a-z]+"), unique=True), ()),
    "parts": y.Optional(y.ListOf(y.Mapping({"size": y.Integer("a size", minimum=0, maximum=8)}), "a list of parts"), []),
})


def read(tmp_path, text: str):
    path = tmp_path / "thing.yaml"
    path.write_text(text)
    return y.load(path, SCHEMA)


def test_a_valid_document_reads_into_typed_values_with_defaults(tmp_path):
    record = read(tmp_path, "name: ' tiny '\nkind: moe\nlayers: 32\n")
    assert dict(record) == {"name": "tiny", "kind": "moe", "layers": 32, "fast": False, "tags": (), "parts": []}
    assert record.node.line_of("layers") == 3
    record = read(tmp_path, "name: t\nkind: dense\nlayers: +4\nfast: true\ntags: [a, b]\nparts:\n- size: 0\n")
    assert (record["layers"], record["fast"], record["tags"], record["parts"][0]["size"]) == (4, True, ("a", "b"), 0)


@pytest.mark.parametrize("line, where, problem", [
    ("layers: true", ":3: layers", "expected an integer from 1 to 1024, got 'true'"),
    ("layers: 1.5", ":3: layers", "expected an integer from 1 to 1024, got '1.5'"),
    ("layers: 1e3", ":3: layers", "expected an integer from 1 to 1024"),
    ("layers: 0x10", ":3: layers", "expected an integer from 1 to 1024"),
    ("layers: 0", ":3: layers", "0 is out of range"),
    ("layers: '12'", ":3: layers", "expected an integer"),  # a quoted number is a string
    ("layers: [1]", ":3: layers", "got a list"),
    ("kind: sparse", ":2: kind", "'sparse' is not one of dense, moe"),
    ("fast: 1", ":4: fast", "expected true or false, got '1'"),
    ("tags: [a, A]", ":4: tags[1]", "'A' is not a tag"),
    ("tags: [a, a]", ":4: tags[1]", "'a' is listed twice"),
    ("tags: a", ":4: tags", "expected a list of tags"),
    ("parts: [{size: 9}]", ":4: parts[0].size", "9 is out of range"),
    ("parts: [{size: 1, colour: red}]", ":4: parts[0].colour", "unknown key; expected one of size"),
    ("colour: red", ":4: colour", "unknown key"),
])
def test_each_bad_field_names_file_line_and_key_path(tmp_path, line, where, problem):
    lines = {"name": "name: t", "kind": "kind: dense", "layers": "layers: 2"}
    lines[line.split(":")[0]] = line  # in its place, or appended as line 4
    with pytest.raises(InvalidInput) as caught:
        read(tmp_path, "\n".join(lines.values()) + "\n")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'thing.yaml'}{where}: "), message
    assert problem in message


def test_a_missing_field_names_the_mapping_and_says_what_to_add(tmp_path):
    with pytest.raises(InvalidInput, match=r"thing.yaml:1: layers: missing; expected the number of layers") as caught:
        read(tmp_path, "name: t\nkind: dense\n")
    assert "add layers:" in caught.value.hint


def test_an_optional_field_left_empty_takes_its_default(tmp_path):
    assert read(tmp_path, "name: t\nkind: dense\nlayers: 2\ntags:\n")["tags"] == ()


def test_a_huge_integer_is_refused_at_once(tmp_path):
    start = time.monotonic()
    with pytest.raises(InvalidInput, match=r":3: layers: a number of 401 digits is out of range"):
        read(tmp_path, "name: t\nkind: dense\nlayers: 1" + "0" * 400 + "\n")
    with pytest.raises(InvalidInput, match=r":3: layers: a number of 100000 digits is out of range"):
        read(tmp_path, "name: t\nkind: dense\nlayers: " + "9" * 100_000 + "\n")
    assert time.monotonic() - start < 2


def test_single_line_and_empty_strings(tmp_path):
    with pytest.raises(InvalidInput, match=r":1: name: expected a single line"):
        read(tmp_path, "name: |\n  one\n  two\nkind: dense\nlayers: 2\n")
    with pytest.raises(InvalidInput, match=r":1: name: expected a short name as a non-empty string"):
        read(tmp_path, "name: ~\nkind: dense\nlayers: 2\n")


def test_mapping_of_checks_each_key(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("good: 1\nBad Key: 2\n")
    reader = y.MappingOf(y.String("a lowercase name", pattern=re.compile(r"[a-z]+"), what="name"),
                         y.Integer("a count", minimum=0, maximum=9), "a mapping of name to count")
    with pytest.raises(InvalidInput, match=r"m.yaml:2: Bad Key: 'Bad Key' is not a valid name"):
        y.load(path, reader)


def test_safe_reading_refuses_duplicates_and_empty_files(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(InvalidInput, match=r"d.yaml:3: duplicate key 'a' \(first on line 1\)"):
        y.read_document(path)
    path.write_text("# only a comment\n")
    with pytest.raises(InvalidInput, match=r"d.yaml: the file is empty"):
        y.read_document(path)
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(InvalidInput, match=r"d.yaml: not UTF-8"):
        y.read_document(path)


def test_a_json_document_is_read_by_the_same_readers(tmp_path):
    """plain_document: what json.loads gave, without lines; Text takes only strings (quoted in YAML)."""
    schema = y.Mapping({"commit": y.Text("a commit id", non_empty=True), "url": y.Text("a URL"), "left": y.Optional(y.Text("a blob"))})
    path = tmp_path / "state.json"
    assert schema.read(y.plain_document(path, {"commit": "abc", "url": "", "left": None})) == {"commit": "abc", "url": "", "left": None}
    for data, problem in (({"commit": 1, "url": ""}, "commit: expected a commit id as a non-empty string, got '1'"),
                          ({"commit": "", "url": ""}, "commit: expected a commit id as a non-empty string, got ''"),
                          ({"commit": "a", "url": True}, "url: expected a URL as a string, got 'true'"),
                          ({"commit": "a", "url": "", "extra": 1}, "extra: unknown key")):
        with pytest.raises(InvalidInput) as caught:
            schema.read(y.plain_document(path, data))
        assert caught.value.message.startswith(f"{path}: {problem}")
    (tmp_path / "quoted.yaml").write_text('commit: "2"\nurl: x\n')
    assert y.load(tmp_path / "quoted.yaml", schema)["commit"] == "2"
    (tmp_path / "plain.yaml").write_text("commit: 2\nurl: x\n")
    with pytest.raises(InvalidInput, match=r"plain.yaml:1: commit: expected a commit id"):
        y.load(tmp_path / "plain.yaml", schema)


def test_yamlio_is_the_only_module_that_imports_pyyaml():
    """One YAML layer: every file rocmpatch reads or writes goes through it (line numbers, duplicate keys refused)."""
    import ast
    from pathlib import Path

    package = Path(y.__file__).parent
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "yaml" or name.startswith("yaml.") for name in names):
                importers.add(path.relative_to(package).as_posix())
    assert importers == {"yamlio.py"}
