"""The two files rocmpatch reads: patchsets/<release>/series.yaml (written by people) and
upstream.lock (written by `rocmpatch lock`, one entry per release). Both are validated on load; an
error names the file, the line and the key, and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rocmpatch.errors import InvalidInput
from rocmpatch.files import MAX_TEXT_FILE, read_regular_file

SERIES_FILE = "series.yaml"
RELEASE_FILE = "release.yaml"  # beside series.yaml: where the release was validated, its smoke profile
PLATFORMS = ("cpu", "rocm", "cuda")
LOCK_FILE = "upstream.lock"
LOCK_VERSION = 2
LOCK_HEADER = "# Written by `rocmpatch lock` from patchsets/<release>/series.yaml; do not edit by hand.\n"
OVERLAY_LOCK_FILE = "overlay.lock"  # beside an overlay's series.yaml
OVERLAY_LOCK_VERSION = 1
OVERLAY_LOCK_HEADER = ("# Written by `rocmpatch lock --overlay DIR` from this folder's series.yaml and patch files;\n"
                       "# do not edit by hand. The overlay's patches apply on top of the release's whole series.\n")

# libyaml's composer is ~10x faster than the pure-Python one (it keeps line marks), and every
# command reads series.yaml; fall back where PyYAML was built without it.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_PATCH_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.(patch|diff)")


@dataclass(frozen=True)
class SeriesEntry:
    """One patch as authored: what it does, why, and where it came from (in the spirit of DEP-3)."""

    name: str
    file: str
    summary: str
    description: str
    why: str
    author: str
    origin: str
    forwarded: str
    last_update: str


@dataclass(frozen=True)
class Series:
    directory: Path
    entries: tuple[SeriesEntry, ...]

    def patch_path(self, entry: SeriesEntry) -> Path:
        return self.directory / entry.file


@dataclass(frozen=True)
class LockedPatch:
    name: str
    file: str
    sha256: str


@dataclass(frozen=True)
class Upstream:
    url: str
    ref: str
    commit: str
    tree: str
    date: str = ""  # the commit's committer date (ISO 8601): orders releases, "newest" is the latest


@dataclass(frozen=True)
class Lock:
    upstream: Upstream
    patches: tuple[LockedPatch, ...]
    patched_tree: str

    def to_data(self) -> dict:
        return {
            "upstream": {
                "url": self.upstream.url,
                "ref": self.upstream.ref,
                "commit": self.upstream.commit,
                "tree": self.upstream.tree,
                "date": self.upstream.date,
            },
            "patches": [{"name": p.name, "file": p.file, "sha256": p.sha256} for p in self.patches],
            "patched_tree": self.patched_tree,
        }


@dataclass(frozen=True)
class LockFile:
    """upstream.lock: one Lock per release, keyed by the release's folder name in patchsets/."""

    releases: dict[str, Lock]

    def newest(self, among: list[str] | None = None) -> str | None:
        """The release (of `among`, default all) whose pinned commit is the most recent (ties: the larger name)."""
        names = [name for name in self.releases if among is None or name in among]
        return max(names, key=lambda name: (self.releases[name].upstream.date, name)) if names else None

    def with_release(self, name: str, lock: Lock) -> "LockFile":
        return LockFile({**self.releases, name: lock})

    def to_yaml(self) -> str:
        ordered = sorted(self.releases, key=lambda name: (self.releases[name].upstream.date, name))
        data = {"version": LOCK_VERSION, "releases": {name: self.releases[name].to_data() for name in ordered}}
        return LOCK_HEADER + yaml.safe_dump(data, sort_keys=False)


_SERIES_FIELDS = {
    "name": "a short lowercase name such as 'softmax'",
    "file": "the patch file name in patchsets/, ending in .patch",
    "summary": "one line saying what the patch does",
    "description": "what the patch changes",
    "why": "why the change is needed",
    "author": "who wrote it",
    "origin": "where it comes from ('rocmpatch', or an upstream commit URL)",
    "forwarded": "'no', 'not-needed', or where it was sent upstream",
    "last-update": "the date of the last change, YYYY-MM-DD",
}


def load_series(directory: Path) -> Series:
    path = directory / SERIES_FILE
    root = _load_mapping(path, {"series": "the ordered list of patches"})
    items = root.get("series")
    if not isinstance(items, _Node) or not isinstance(items.value, list) or not items.value:
        raise InvalidInput(_where(path, root.line_of("series"), "series"), "expected a non-empty list of patches")
    entries: list[SeriesEntry] = []
    for index, item in enumerate(items.value):
        key = f"series[{index}]"
        fields = _mapping(path, item, key, _SERIES_FIELDS)
        values = {f: _string(path, fields, f, f"{key}.{f}", _SERIES_FIELDS[f]) for f in _SERIES_FIELDS}
        _match(path, fields, "name", key, _NAME, values["name"])
        _match(path, fields, "file", key, _PATCH_FILE, values["file"])
        if "\n" in values["summary"].strip():
            raise InvalidInput(_where(path, fields.line_of("summary"), f"{key}.summary"), "expected a single line")
        entries.append(
            SeriesEntry(
                name=values["name"], file=values["file"], summary=values["summary"].strip(),
                description=values["description"].strip(), why=values["why"].strip(),
                author=values["author"], origin=values["origin"], forwarded=values["forwarded"],
                last_update=values["last-update"],
            )
        )
    for field in ("name", "file"):
        seen: set[str] = set()
        for index, entry in enumerate(entries):
            value = getattr(entry, field)
            if value in seen:
                raise InvalidInput(_where(path, items.value[index].lineno, f"series[{index}].{field}"), f"duplicate {field} {value!r}")
            seen.add(value)
    return Series(directory=directory, entries=tuple(entries))


SINGLE_RELEASE_HINT = (
    "move patchsets/series.yaml and its patch files into patchsets/<release>/ (e.g. patchsets/core_v0.5.0/), "
    "then run 'rocmpatch lock --release <release>' to write the multi-release lock"
)


def load_lock_file(path: Path) -> LockFile:
    root = _load_mapping(path, {"version": "the lock format version", "releases": "one entry per release",
                                "upstream": "(version 1 only)", "patches": "(version 1 only)", "patched_tree": "(version 1 only)"})
    version = root.get("version")
    if version is not None and version.value == "1":
        raise InvalidInput(_where(path, version.lineno, "version"), "is the single-release lock of rocmpatch 0.1", hint=SINGLE_RELEASE_HINT)
    if version is None or version.value != str(LOCK_VERSION):
        raise InvalidInput(_where(path, root.line_of("version"), "version"), f"expected version: {LOCK_VERSION}", hint="regenerate it with 'rocmpatch lock'")
    for stray in ("upstream", "patches", "patched_tree"):
        if root.get(stray) is not None:
            raise InvalidInput(_where(path, root.line_of(stray), stray), "belongs inside releases.<release> in version 2", hint="regenerate it with 'rocmpatch lock'")
    releases_node = root.get("releases")
    if releases_node is None or not isinstance(releases_node.value, dict) or not releases_node.value:
        raise InvalidInput(_where(path, root.line_of("releases"), "releases"), "expected a mapping of release name to its pin, patches and patched tree")
    releases = {}
    for name, node in releases_node.value.items():
        if not _RELEASE.fullmatch(name):
            raise InvalidInput(_where(path, node.lineno, f"releases.{name}"), "is not a valid release name (a folder name in patchsets/, such as core_v0.19.0)")
        releases[name] = _load_release(path, node, f"releases.{name}")
    return LockFile(releases)


def _load_release(path: Path, node: _Node, key: str) -> Lock:
    entry = _mapping(path, node, key, {"upstream": "the pinned commit", "patches": "the sha256 of each patch",
                                       "patched_tree": "the tree id after the series"})
    upstream_fields = {"url": "the upstream git URL", "ref": "the tag or branch name of the pin",
                       "commit": "the full 40-hex commit id", "tree": "the 40-hex tree id of that commit",
                       "date": "the commit's date (ISO 8601)"}
    upstream = _mapping(path, entry.get("upstream"), f"{key}.upstream", upstream_fields)
    up = {f: _string(path, upstream, f, f"{key}.upstream.{f}", d) for f, d in upstream_fields.items()}
    for field in ("commit", "tree"):
        if not _HEX40.fullmatch(up[field]):
            raise InvalidInput(
                _where(path, upstream.line_of(field), f"{key}.upstream.{field}"),
                f"expected a full 40-hex {'commit' if field == 'commit' else 'tree'} id, got {up[field]!r}",
                hint="a ref or branch name belongs in upstream.ref; run 'rocmpatch lock'",
            )
    patches = _locked_patches(path, entry, f"{key}.patches")
    tree = entry.get("patched_tree")
    if tree is None or not isinstance(tree.value, str) or not _HEX40.fullmatch(tree.value):
        raise InvalidInput(_where(path, entry.line_of("patched_tree"), f"{key}.patched_tree"), "expected the 40-hex tree id of the patched tree")
    return Lock(Upstream(**up), patches, tree.value)


def _locked_patches(path: Path, entry: _Node, key: str) -> tuple[LockedPatch, ...]:
    """A lock's `patches:` list of {name, file, sha256}, in series order."""
    patches_node = entry.get("patches")
    if patches_node is None or not isinstance(patches_node.value, list):
        raise InvalidInput(_where(path, entry.line_of("patches"), key), "expected a list of {name, file, sha256}")
    patch_fields = {"name": "the patch name", "file": "the patch file", "sha256": "the file's sha256"}
    patches = []
    for index, item in enumerate(patches_node.value):
        item_key = f"{key}[{index}]"
        fields = _mapping(path, item, item_key, patch_fields)
        values = {f: _string(path, fields, f, f"{item_key}.{f}", d) for f, d in patch_fields.items()}
        _match(path, fields, "sha256", item_key, _HEX64, values["sha256"])
        patches.append(LockedPatch(values["name"], values["file"], values["sha256"]))
    return tuple(patches)


@dataclass(frozen=True)
class Validation:
    """One record of the patched tree working somewhere: what ran, on which platform, when."""

    platform: str  # cpu | rocm | cuda
    date: str
    hardware: str
    what: str


@dataclass(frozen=True)
class ReleaseInfo:
    validated: tuple[Validation, ...]
    smoke: dict[str, Any]  # the smoke profile, as plain data: rocmpatch.smoke.profile reads it


@dataclass(frozen=True)
class OverlayLock:
    """An overlay's lock (DIR/overlay.lock): which release's patched tree its patches apply to, the
    sha256 of each patch file, and the tree after the release's series plus the overlay."""

    release: str
    release_tree: str  # the release's patched_tree when this lock was written
    patches: tuple[LockedPatch, ...]
    patched_tree: str

    def to_yaml(self) -> str:
        data = {
            "version": OVERLAY_LOCK_VERSION,
            "release": self.release,
            "release_tree": self.release_tree,
            "patches": [{"name": p.name, "file": p.file, "sha256": p.sha256} for p in self.patches],
            "patched_tree": self.patched_tree,
        }
        return OVERLAY_LOCK_HEADER + yaml.safe_dump(data, sort_keys=False)


_OVERLAY_LOCK_FIELDS = {
    "version": f"the overlay lock format version ({OVERLAY_LOCK_VERSION})",
    "release": "the release (a folder in patchsets/) the overlay applies on top of",
    "release_tree": "the 40-hex tree id of that release's patched tree",
    "patches": "the sha256 of each overlay patch",
    "patched_tree": "the 40-hex tree id after the release's series plus the overlay",
}


def load_overlay_lock(path: Path) -> OverlayLock:
    root = _load_mapping(path, _OVERLAY_LOCK_FIELDS)
    version = root.get("version")
    if version is None or version.value != str(OVERLAY_LOCK_VERSION):
        raise InvalidInput(_where(path, root.line_of("version"), "version"), f"expected version: {OVERLAY_LOCK_VERSION}",
                           hint="regenerate it with 'rocmpatch lock --overlay DIR'")
    values = {f: _string(path, root, f, f, _OVERLAY_LOCK_FIELDS[f]) for f in ("release", "release_tree", "patched_tree")}
    if not _RELEASE.fullmatch(values["release"]):
        raise InvalidInput(_where(path, root.line_of("release"), "release"), f"{values['release']!r} is not a valid release name (a folder name in patchsets/, such as core_v0.19.0)")
    for field in ("release_tree", "patched_tree"):
        if not _HEX40.fullmatch(values[field]):
            raise InvalidInput(_where(path, root.line_of(field), field), f"expected a full 40-hex tree id, got {values[field]!r}",
                               hint="regenerate it with 'rocmpatch lock --overlay DIR'")
    patches = _locked_patches(path, root, "patches")
    return OverlayLock(values["release"], values["release_tree"], patches, values["patched_tree"])


_VALIDATION_FIELDS = {"platform": f"one of {', '.join(PLATFORMS)}", "date": "YYYY-MM-DD", "hardware": "the machine: CPU model or GPU and count",
                      "what": "what ran and what it showed"}


def load_release_info(directory: Path) -> ReleaseInfo:
    """patchsets/<release>/release.yaml; a release without one was validated nowhere and has no smoke profile."""
    path = directory / RELEASE_FILE
    if not path.exists():
        return ReleaseInfo((), {})
    root = _load_mapping(path, {"validated": "where the patched tree was shown to work", "smoke": "the smoke profile"})
    records = []
    node = root.get("validated")
    if node is not None:
        if not isinstance(node.value, list):
            raise InvalidInput(_where(path, node.lineno, "validated"), "expected a list of {platform, date, hardware, what}")
        for index, item in enumerate(node.value):
            key = f"validated[{index}]"
            fields = _mapping(path, item, key, _VALIDATION_FIELDS)
            values = {f: _string(path, fields, f, f"{key}.{f}", d) for f, d in _VALIDATION_FIELDS.items()}
            if values["platform"] not in PLATFORMS:
                raise InvalidInput(_where(path, fields.line_of("platform"), f"{key}.platform"), f"{values['platform']!r} is not one of {', '.join(PLATFORMS)}")
            records.append(Validation(**{k: v.strip() for k, v in values.items()}))
    smoke = root.get("smoke")
    return ReleaseInfo(tuple(records), _plain(smoke) if smoke is not None else {})


def _plain(node: _Node) -> Any:
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def is_release_name(value: str) -> bool:
    return bool(_RELEASE.fullmatch(value))


def is_full_commit_id(value: str) -> bool:
    return bool(_HEX40.fullmatch(value))


# --- a small YAML reader that keeps line numbers ------------------------------------------


@dataclass
class _Node:
    value: Any  # str, list[_Node], or dict[str, _Node]
    lineno: int  # 1-based
    key_line: int = 0  # the line of the key naming this node, in a mapping

    def get(self, key: str) -> "_Node | None":
        return self.value.get(key) if isinstance(self.value, dict) else None

    def line_of(self, key: str) -> int:
        """The line of `key`, or of this mapping when the key is missing."""
        node = self.get(key)
        return node.lineno if node else self.lineno


def _to_node(path: Path, node: yaml.Node) -> _Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping: dict[str, _Node] = {}
        for key, value in node.value:
            name = str(key.value)
            if name in mapping:
                raise InvalidInput(f"{path}:{key.start_mark.line + 1}", f"duplicate key {name!r} (first on line {mapping[name].key_line})",
                                   hint="each key may appear once; delete one of them")
            mapping[name] = _to_node(path, value)
            mapping[name].key_line = key.start_mark.line + 1
        return _Node(mapping, line)
    if isinstance(node, yaml.SequenceNode):
        return _Node([_to_node(path, v) for v in node.value], line)
    return _Node(node.value, line)


# series.yaml and upstream.lock are small, flat documents: anything deeper, or using anchors
# and aliases (which make a few bytes expand into gigabytes), is refused before it is built.
MAX_YAML_DEPTH = 16


def load_yaml(path: Path) -> yaml.Node | None:
    """The composed YAML document of `path`, read safely: a regular file of bounded size, UTF-8,
    no anchors or aliases, nesting at most MAX_YAML_DEPTH deep, no duplicate keys (checked in
    _to_node). Every problem is InvalidInput naming the file and line."""
    data = read_regular_file(path, limit=MAX_TEXT_FILE, what="YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(path, f"not UTF-8 text ({exc.reason})") from None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=YAML_LOADER):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise InvalidInput(f"{path}:{line}", "YAML anchors and aliases (&name, *name) are not allowed here", hint="write the value out in full")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise InvalidInput(f"{path}:{line}", f"nested more than {MAX_YAML_DEPTH} levels deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.compose(text, Loader=YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InvalidInput(where, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None


def _load_mapping(path: Path, allowed: dict[str, str]) -> _Node:
    composed = load_yaml(path)
    if composed is None:
        raise InvalidInput(path, "the file is empty")
    return _mapping(path, _to_node(path, composed), None, allowed)


def _mapping(path: Path, node: _Node | None, key: str | None, allowed: dict[str, str]) -> _Node:
    if node is None or not isinstance(node.value, dict):
        line = node.lineno if node else None
        raise InvalidInput(_where(path, line, key), f"expected a mapping with keys {', '.join(allowed)}")
    for name, child in node.value.items():
        if name not in allowed:
            raise InvalidInput(_where(path, child.lineno, _join(key, name)), f"unknown key; expected one of {', '.join(allowed)}")
    return node


def _string(path: Path, node: _Node, field: str, key: str, description: str) -> str:
    child = node.get(field)
    if child is None:
        raise InvalidInput(_where(path, node.lineno, key), f"missing; expected {description}")
    if not isinstance(child.value, str) or not child.value.strip():
        raise InvalidInput(_where(path, child.lineno, key), f"expected {description} as a non-empty string")
    return child.value


def _match(path: Path, node: _Node, field: str, key: str, pattern: re.Pattern, value: str) -> None:
    if not pattern.fullmatch(value):
        raise InvalidInput(_where(path, node.line_of(field), f"{key}.{field}"), f"{value!r} is not a valid {field}", hint=_SERIES_FIELDS.get(field, pattern.pattern))


def _join(parent: str | None, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _where(path: Path, line: int | None, key: str | None) -> str:
    place = f"{path}:{line}" if line else str(path)
    return f"{place}: {key}" if key else place

