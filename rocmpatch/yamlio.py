"""The one way rocmpatch reads a YAML file people write or keep (series.yaml, release.yaml,
upstream.lock, overlay.lock, recipes): safely, keeping line numbers, against a schema declared once.

Reading is safe: a regular file of at most MAX_TEXT_FILE bytes, UTF-8, no anchors or aliases (a few
bytes of them expand into gigabytes), nested at most MAX_DEPTH deep, no duplicate keys (the last one
would win silently). Every problem, in the file or against its schema, is one `InvalidInput` reading
`FILE:LINE: KEY.PATH: problem`, with a hint saying the fix where the problem does not.

The whole API:

    load(path, reader)      reader.read(the document's root node)
    read_document(path)     the root Node (an empty file is an error)
    plain_document(path, data)   data another parser read (json.loads of a file rocmpatch wrote, such
                            as a stopped rebase's state.json) as Nodes, so a schema declared here reads
                            it too: no line numbers (errors name the file and the key path), each
                            scalar tagged by its Python type
    where(path, line, key)  the "FILE:LINE: KEY" an error starts with, for one raised without a Node
    composed(path)          the file's text and its composed yaml.Node tree (line marks), for a program
                            that edits the text by lines (rebase_results), read as safely as the rest
    dump(data)              YAML text for a file rocmpatch writes (the locks), keys in the order given

    Node                    a value with its place: .value (a scalar's text, list[Node], or
                            dict[str, Node]), .line, .key (the key path: "series[0].name"), .path,
                            .tag (str, int, float, bool, null, ... for a scalar; map, seq);
                            .get(key), .line_of(key), .plain() (plain Python data), and
                            .error(problem, hint=None, key=None) -> the InvalidInput to raise at it
                            (or at its child `key`, present or not)

    Readers: declare each field once; `description` says what is expected and ends up in errors.
    String(description, pattern=None, what=None, hint=None, single_line=False, strip=False) -> str
                 any non-empty scalar's text (`2` reads as '2'); `pattern` must match it whole:
                 "'x' is not a valid WHAT" when `what` is given, else "expected DESCRIPTION, got 'x'"
    Line(description, ...)              a String on one line, returned stripped
    Text(description, non_empty=False)  a string scalar only (quoted in YAML, a string in JSON; a number
                 or true is refused), empty allowed unless non_empty: for files rocmpatch writes
    Bool(description)                   true or false -> bool
    Integer(description, minimum=, maximum=)   a plain decimal integer in range -> int; true, 1.5,
                 1e3, 0x10 are refused, and so is a number too long for the range, before any int()
    Enum(choices, description=None)     one of `choices` -> str
    Strings(item, pattern=None, non_empty=False, unique=False)   a list of strings -> tuple[str];
                 `item` names one ("dotted module name"): "'x' is not a dotted module name"
    ListOf(reader, description, non_empty=False)      -> list of what `reader` reads
    Mapping(fields, description=None)   only the keys of `fields` -> Record (a dict of key -> value,
                 every field present, defaults filled in; `.node` is the mapping's Node, for checks
                 across fields)
    MappingOf(keys, values, description)   any keys, each read by `keys` (a String), values by
                 `values` -> dict
    Optional(reader, default=None)      the field may be left out, or left empty (`key:`)
    Raw(description)                    the Node itself, for a part the schema checks by hand

A schema module declares its readers as module constants and calls `load(path, SCHEMA)`; what
spans fields (a duplicate name, one key needing another) stays in the schema, which raises
`record.node.error(...)` so the error still names the file, the line and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rocmpatch.errors import InvalidInput
from rocmpatch.files import MAX_TEXT_FILE, read_regular_file

# libyaml's composer is ~10x faster than the pure-Python one (it keeps line marks), and every
# command reads series.yaml; fall back where PyYAML was built without it.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# The files read here are small and flat: anything deeper is refused before it is built.
MAX_DEPTH = 16

_TAG_PREFIX = "tag:yaml.org,2002:"
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_MAX_DIGITS = 18  # within int64; a longer number is out of any range read here, refused before int()


def dump(data: Any) -> str:
    """YAML text for what rocmpatch writes (the locks): keys in the order given."""
    return yaml.safe_dump(data, sort_keys=False)


def where(path: Path | str, line: int | None, key: str | None) -> str:
    """`FILE:LINE: KEY`, leaving out what is not known."""
    place = f"{path}:{line}" if line else str(path)
    return f"{place}: {key}" if key else place


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


@dataclass
class Node:
    value: Any  # a scalar's text (str), list[Node] for a sequence, dict[str, Node] for a mapping
    line: int  # 1-based
    key: str  # the key path from the document's root ("" for the root)
    path: Path
    tag: str = "str"  # a scalar's resolved type (str, int, float, bool, null, timestamp, ...), or map, seq
    key_line: int = field(default=0)  # in a mapping: the line of the key naming this node

    @property
    def lineno(self) -> int:
        return self.line

    @property
    def is_null(self) -> bool:
        return self.tag == "null"

    def get(self, key: str) -> "Node | None":
        return self.value.get(key) if isinstance(self.value, dict) else None

    def line_of(self, key: str) -> int:
        """The line of `key`'s value, or of this mapping when the key is missing."""
        child = self.get(key)
        return child.line if child else self.line

    def error(self, problem: str, hint: str | None = None, *, key: str | None = None) -> InvalidInput:
        """The InvalidInput for a problem at this node, or at its child `key` (present or not)."""
        if key is None:
            return InvalidInput(where(self.path, self.line, self.key), problem, hint=hint)
        return InvalidInput(where(self.path, self.line_of(key), _join(self.key, key)), problem, hint=hint)

    def plain(self) -> Any:
        """The value as plain Python data (scalars stay text)."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value


def _to_node(path: Path, node: yaml.Node, key: str) -> Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping: dict[str, Node] = {}
        for key_node, value in node.value:
            name = str(key_node.value)
            if name in mapping:
                raise InvalidInput(f"{path}:{key_node.start_mark.line + 1}",
                                   f"duplicate key {name!r} (first on line {mapping[name].key_line})",
                                   hint="each key may appear once; delete one of them")
            mapping[name] = _to_node(path, value, _join(key, name))
            mapping[name].key_line = key_node.start_mark.line + 1
        return Node(mapping, line, key, path, "map")
    if isinstance(node, yaml.SequenceNode):
        return Node([_to_node(path, v, f"{key}[{i}]") for i, v in enumerate(node.value)], line, key, path, "seq")
    tag = node.tag[len(_TAG_PREFIX):] if node.tag.startswith(_TAG_PREFIX) else node.tag
    return Node(node.value, line, key, path, tag)


def compose(path: Path) -> yaml.Node | None:
    """The composed YAML document of `path`, read safely (see above), or None for an empty file."""
    return composed(path)[1]


def composed(path: Path) -> tuple[str, yaml.Node | None]:
    """`path`'s text and its composed YAML document from the same read (see above): for editing the
    text by the nodes' line marks."""
    data = read_regular_file(path, limit=MAX_TEXT_FILE, what="YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(path, f"not UTF-8 text ({exc.reason})", hint="save it as UTF-8") from None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=YAML_LOADER):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise InvalidInput(f"{path}:{line}", "YAML anchors and aliases (&name, *name) are not allowed here",
                                   hint="write the value out in full")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InvalidInput(f"{path}:{line}", f"nested more than {MAX_DEPTH} levels deep",
                                       hint="these files are flat: flatten it")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return text, yaml.compose(text, Loader=YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InvalidInput(place, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None


def read_document(path: Path) -> Node:
    """The root Node of `path`; an empty file (no document) is an error."""
    root = compose(path)
    if root is None:
        raise InvalidInput(path, "the file is empty")
    return _to_node(path, root, "")


def plain_document(path: Path, data: Any, key: str = "") -> Node:
    """`data` (dicts, lists, str, int, float, bool, None, as json.loads gives them) as Nodes without lines."""
    if isinstance(data, dict):
        return Node({str(k): plain_document(path, v, _join(key, str(k))) for k, v in data.items()}, 0, key, path, "map")
    if isinstance(data, list):
        return Node([plain_document(path, v, f"{key}[{i}]") for i, v in enumerate(data)], 0, key, path, "seq")
    if data is None:
        return Node("null", 0, key, path, "null")
    if isinstance(data, bool):
        return Node("true" if data else "false", 0, key, path, "bool")
    return Node(str(data), 0, key, path, {int: "int", float: "float"}.get(type(data), "str"))


def load(path: Path, reader: "Reader") -> Any:
    """`reader.read` of the document in `path`."""
    return reader.read(read_document(path))


# --- readers: one per kind of field --------------------------------------------------------


class Reader:
    """Reads one node into a Python value, or raises InvalidInput at that node."""

    description = "a value"

    def read(self, node: Node) -> Any:  # pragma: no cover - every reader overrides it
        raise NotImplementedError


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _text(node: Node, expected: str) -> str:
    """A scalar's text; a list or mapping where a scalar belongs is an error."""
    if isinstance(node.value, (list, dict)):
        raise node.error(f"expected {expected}, got a {'list' if node.tag == 'seq' else 'mapping'}")
    return node.value


class String(Reader):
    def __init__(self, description: str, *, pattern: re.Pattern | None = None, what: str | None = None,
                 hint: str | None = None, single_line: bool = False, strip: bool = False) -> None:
        self.description, self.pattern, self.what, self.hint = description, pattern, what, hint
        self.single_line, self.strip = single_line, strip or single_line

    def read(self, node: Node) -> str:
        text = _text(node, f"{self.description} as a non-empty string")
        if node.is_null or not text.strip():
            raise node.error(f"expected {self.description} as a non-empty string")
        if self.single_line and "\n" in text.strip():
            raise node.error("expected a single line", hint=self.description)
        if self.pattern is not None and not self.pattern.fullmatch(text):
            if self.what:
                raise node.error(f"{text!r} is not a valid {self.what}", hint=self.hint or self.description)
            raise node.error(f"expected {self.description}, got {text!r}", hint=self.hint)
        return text.strip() if self.strip else text


def Line(description: str, **options: Any) -> String:  # noqa: N802 - a reader like the classes
    """A String on one line, returned stripped."""
    return String(description, single_line=True, **options)


class Text(Reader):
    def __init__(self, description: str, *, non_empty: bool = False) -> None:
        self.description, self.non_empty = description, non_empty

    def read(self, node: Node) -> str:
        text = _text(node, f"{self.description} as a string")
        if node.tag != "str" or (self.non_empty and not text):
            raise node.error(f"expected {self.description} as a {'non-empty ' if self.non_empty else ''}string, got {text!r}")
        return text


class Bool(Reader):
    def __init__(self, description: str) -> None:
        self.description = description

    def read(self, node: Node) -> bool:
        text = _text(node, "true or false")
        if node.tag != "bool":
            raise node.error(f"expected true or false, got {text!r}", hint=self.description)
        return text.lower() in ("true", "yes", "on")


class Integer(Reader):
    def __init__(self, description: str, *, minimum: int, maximum: int) -> None:
        self.description, self.minimum, self.maximum = description, minimum, maximum

    def read(self, node: Node) -> int:
        expected = f"an integer from {self.minimum} to {self.maximum}"
        text = _text(node, expected)
        if node.tag != "int" or not _DECIMAL.fullmatch(text):
            shown = text if len(text) <= 40 else f"{text[:20]}..."
            raise node.error(f"expected {expected}, got {shown!r}", hint=self.description)
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) > _MAX_DIGITS or not self.minimum <= int(text) <= self.maximum:
            shown = text if len(digits) <= _MAX_DIGITS else f"a number of {len(digits)} digits"
            raise node.error(f"{shown} is out of range: expected {expected}", hint=self.description)
        return int(text)


class Enum(Reader):
    def __init__(self, choices: tuple[str, ...] | list[str], description: str | None = None) -> None:
        self.choices = tuple(choices)
        self.description = description or f"one of {', '.join(self.choices)}"

    def read(self, node: Node) -> str:
        text = _text(node, f"one of {', '.join(self.choices)}")
        if text not in self.choices:
            raise node.error(f"{text!r} is not one of {', '.join(self.choices)}", hint=self.description)
        return text


class Strings(Reader):
    def __init__(self, item: str, *, pattern: re.Pattern | None = None, non_empty: bool = False,
                 unique: bool = False) -> None:
        self.item, self.pattern, self.non_empty, self.unique = item, pattern, non_empty, unique
        self.description = f"a {'non-empty ' if non_empty else ''}list of {item}s"

    def read(self, node: Node) -> tuple[str, ...]:
        if not isinstance(node.value, list) or (self.non_empty and not node.value):
            raise node.error(f"expected {self.description}")
        values: list[str] = []
        for item in node.value:
            if isinstance(item.value, (list, dict)) or item.is_null or not item.value.strip():
                raise item.error(f"expected {_a(self.item)} as a string")
            if self.pattern is not None and not self.pattern.fullmatch(item.value):
                raise item.error(f"{item.value!r} is not {_a(self.item)}")
            if self.unique and item.value in values:
                raise item.error(f"{item.value!r} is listed twice", hint="list each once")
            values.append(item.value)
        return tuple(values)


class ListOf(Reader):
    def __init__(self, reader: Reader, description: str, *, non_empty: bool = False) -> None:
        self.reader, self.description, self.non_empty = reader, description, non_empty

    def read(self, node: Node) -> list:
        if not isinstance(node.value, list) or (self.non_empty and not node.value):
            raise node.error(f"expected {self.description}")
        return [self.reader.read(item) for item in node.value]


class Optional(Reader):
    def __init__(self, reader: Reader, default: Any = None) -> None:
        self.reader, self.default = reader, default
        self.description = f"{reader.description} (optional)"

    def read(self, node: Node) -> Any:
        return self.default if node.is_null else self.reader.read(node)


class Raw(Reader):
    def __init__(self, description: str) -> None:
        self.description = description

    def read(self, node: Node) -> Node:
        return node


class Record(dict):
    """What Mapping reads: {key: value}, and `.node`, the mapping it was read from."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node


class Mapping(Reader):
    def __init__(self, fields: dict[str, Reader], description: str | None = None) -> None:
        self.fields = fields
        self.description = description or f"a mapping with keys {', '.join(fields)}"

    def check(self, node: Node) -> Node:
        """`node`, if it is a mapping of known keys only (to check a field by hand before reading)."""
        if not isinstance(node.value, dict):
            raise node.error(f"expected a mapping with keys {', '.join(self.fields)}")
        for name, child in node.value.items():
            if name not in self.fields:
                raise child.error(f"unknown key; expected one of {', '.join(self.fields)}",
                                  hint=f"remove {name!r} or correct its spelling")
        return node

    def read(self, node: Node) -> Record:
        self.check(node)
        record = Record(node)
        for name, reader in self.fields.items():
            child = node.get(name)
            if child is not None:
                record[name] = reader.read(child)
            elif isinstance(reader, Optional):
                record[name] = reader.default
            else:
                raise node.error(f"missing; expected {reader.description}", hint=f"add {name}: to it", key=name)
        return record


class MappingOf(Reader):
    def __init__(self, keys: String, values: Reader, description: str, *, non_empty: bool = False) -> None:
        self.keys, self.values, self.description, self.non_empty = keys, values, description, non_empty

    def read(self, node: Node) -> dict[str, Any]:
        if not isinstance(node.value, dict) or (self.non_empty and not node.value):
            raise node.error(f"expected {self.description}")
        result = {}
        for name, child in node.value.items():
            self.keys.read(Node(name, child.line, child.key, child.path))
            result[name] = self.values.read(child)
        return result
