"""Parse unified diffs and apply them exactly, in memory.

"Exactly" means what `rocmpatch apply` promises: every hunk's old lines must sit at the
line number the hunk names, with no fuzz and no offset. Working on bytes in memory (not on
a checkout) is what lets apply be atomic and lets check and drift test a patch against git
blobs without touching a working tree.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

from rocmpatch.errors import InvalidInput, PatchConflict

DEV_NULL = "/dev/null"
REGULAR_MODE = "100644"
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
FILE_MODES = (REGULAR_MODE, "100755")


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based position in its file, as users count hunks in messages
    source_start: int
    source_length: int
    old_lines: tuple[str, ...]
    new_lines: tuple[str, ...]
    header: str  # the "@@ -a,b +c,d @@" line, for messages


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None when the patch adds the file
    new_path: str | None  # None when the patch deletes the file
    hunks: tuple[Hunk, ...]
    new_mode: str  # mode of an added file ("100644" unless the diff says otherwise)
    diff: str = field(default="", repr=False, compare=False)  # the whole diff text (shared, not copied)
    span: tuple[int, int] = (0, 0)  # this file's section of `diff`
    copy: bool = False  # a git copy: old_path stays (a reversed copy removes new_path again)

    @property
    def text(self) -> str:
        """This file's section of the diff, usable as a patch on its own."""
        return self.diff[self.span[0]:self.span[1]]

    @property
    def path(self) -> str:
        """The path a user recognizes: the new one, or the old one for a deletion."""
        return self.new_path or self.old_path or ""

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))

    def reversed(self) -> "FilePatch":
        hunks = tuple(
            Hunk(h.index, _target_start(h), len(h.new_lines), h.new_lines, h.old_lines, h.header)
            for h in self.hunks
        )
        if self.copy:  # undoing a copy: the copy goes, its source stays
            return FilePatch(self.new_path, None, hunks, REGULAR_MODE, self.diff, self.span, copy=True)
        return FilePatch(self.new_path, self.old_path, hunks, REGULAR_MODE, self.diff, self.span)


@dataclass(frozen=True)
class Patch:
    name: str
    source: str  # where the text came from, for messages
    files: tuple[FilePatch, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for f in self.files for p in f.paths))

    def reversed(self) -> "Patch":
        return Patch(self.name, self.source, tuple(f.reversed() for f in reversed(self.files)))


Reader = Callable[[str], "bytes | None"]


def parse_patch(text: str, *, name: str, source: str) -> Patch:
    """Parse a unified diff (plain or git format-patch); refuse unsafe or binary content."""
    try:
        parsed = _parse_diff(text)
    except _DiffError as exc:
        raise InvalidInput(source, f"not a valid unified diff: {exc}", hint="regenerate it with git format-patch") from None
    if not parsed:
        raise InvalidInput(source, "contains no file changes", hint="regenerate it with git format-patch")
    files = []
    for patched in parsed:
        if patched.is_binary_file:
            raise InvalidInput(source, f"binary change to {patched.path} is not supported")
        old_path = _strip_prefix(patched.source_file, source)
        new_path = _strip_prefix(patched.target_file, source)
        info = list(patched.patch_info or [])
        copy = any(line.startswith(("copy from ", "copy to ")) for line in info)
        if patched.is_rename or copy:
            # "rename/copy from/to" name the paths git apply uses: each must be safe, and agree
            # with the ---/+++ names.
            kind = "copy" if copy else "rename"
            named_old, named_new = _extended_header(info, f"{kind} from "), _extended_header(info, f"{kind} to ")
            for named, other in ((named_old, old_path), (named_new, new_path)):
                if named is None:
                    raise InvalidInput(source, f"a {kind} of {patched.path} lacks its '{kind} from' or '{kind} to' line", hint="regenerate it with git format-patch")
                check_safe_path(named, source)
                if other is not None and other != named:
                    raise InvalidInput(source, f"'{kind}' names {named!r}, but the ---/+++ lines name {other!r}", hint="regenerate it with git format-patch")
            old_path, new_path = named_old, named_new
        for path in (old_path, new_path):
            if path is not None:
                check_safe_path(path, source)
        new_mode = _check_modes(info, source, new_path or old_path or "")
        hunks = tuple(patched.hunks)
        if new_mode == SYMLINK_MODE:
            check_symlink_target(new_path or "", "".join(line for h in hunks for line in h.new_lines), source)
        files.append(
            FilePatch(
                old_path=old_path,
                new_path=new_path,
                hunks=hunks,
                new_mode=new_mode,
                diff=text,
                span=patched.span,
                copy=copy,
            )
        )
    return Patch(name=name, source=source, files=tuple(files))


def check_safe_path(path: str, source: str) -> None:
    """A patch may only touch relative paths inside the tree, never .git."""
    parts = path.split("/")
    if (
        path.startswith("/")
        or "\\" in path
        or "\0" in path
        or any(part in ("", ".", "..") for part in parts)
        or any(part.lower() == ".git" for part in parts)
        or posixpath.normpath(path) != path
    ):
        raise InvalidInput(source, f"refusing unsafe path {path!r}", hint="a patch may only touch files inside the tree, never .git")


def _check_modes(info: list[str], source: str, path: str) -> str:
    """The added file's mode; every mode line must name a regular file, an executable, or (for a
    new file only) a symlink. Gitlinks (submodules) and anything else are refused."""
    new_mode = REGULAR_MODE
    for prefix in ("new file mode ", "deleted file mode ", "old mode ", "new mode "):
        mode = _extended_header(info, prefix)
        if mode is None:
            continue
        allowed = (*FILE_MODES, SYMLINK_MODE) if prefix == "new file mode " else FILE_MODES
        if mode not in allowed:
            what = "a gitlink (submodule)" if mode == GITLINK_MODE else "a symlink" if mode == SYMLINK_MODE else "an unknown mode"
            raise InvalidInput(source, f"{path}: '{prefix}{mode}' is {what}, which a patch may not {'create' if prefix == 'new file mode ' else 'change'}",
                               hint="a patch may only add or change regular files (100644, 100755), or add a symlink that stays inside the tree")
        if prefix == "new file mode ":
            new_mode = mode
    return new_mode


def check_symlink_target(path: str, target: str, source: str) -> None:
    """A symlink a patch creates must point inside the tree, never into .git."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if (
        not target
        or target.startswith("/")
        or any(c in target for c in "\0\n\\")
        or joined == ".."
        or joined.startswith("../")
        or any(part.lower() == ".git" for part in joined.split("/"))
    ):
        raise InvalidInput(source, f"the symlink {path!r} points to {target!r}, outside the tree", hint="a symlink a patch adds must point to a path inside the tree (relative, not into .git)")


class ChangedFiles:
    """Files as `base` reads them with changes laid over them (None: deleted). The one way every
    caller (apply_patch within a patch, the series appliers, drift's evaluator) sees a tree that
    earlier changes have moved on."""

    def __init__(self, base: Reader) -> None:
        self.base = base
        self.changes: dict[str, bytes | None] = {}

    def read(self, path: str) -> bytes | None:
        return self.changes[path] if path in self.changes else self.base(path)

    def update(self, changes: Mapping[str, bytes | None]) -> None:
        self.changes.update(changes)


def apply_patch(patch: Patch, read: Reader) -> dict[str, bytes | None]:
    """Apply `patch` to the files `read` returns; return {path: new bytes, or None if deleted}.

    `read(path)` returns a file's bytes, or None when the file does not exist. Later files in
    the same patch see the results of earlier ones. Raises PatchConflict on the first mismatch.
    """
    files = ChangedFiles(read)
    changes, current = files.changes, files.read
    for file_patch in patch.files:
        old = current(file_patch.old_path) if file_patch.old_path else None
        if (file_patch.old_path is None or file_patch.copy) and file_patch.new_path and current(file_patch.new_path) is not None:
            raise PatchConflict(patch.name, file_patch.new_path, None, "the patch creates this file, but it already exists")
        if file_patch.old_path is not None and old is None:
            raise PatchConflict(patch.name, file_patch.old_path, None, "the file does not exist")
        new = apply_file_patch(file_patch, old, patch.name)
        if file_patch.old_path and file_patch.old_path != file_patch.new_path and not (file_patch.copy and file_patch.new_path):
            changes[file_patch.old_path] = None  # a rename (or an undone copy) removes the old path
        if file_patch.new_path:
            changes[file_patch.new_path] = new
    return changes


def apply_file_patch(file_patch: FilePatch, old: bytes | None, patch_name: str) -> bytes | None:
    """Return the file's new bytes (None for a deletion); every hunk must match at its line."""
    lines = _split_lines(old or b"")
    result: list[str] = []
    position = 0  # index into `lines` up to which we have copied
    for hunk in file_patch.hunks:
        # A hunk with no old lines is placed after line `source_start`; others start on it.
        start = hunk.source_start if not hunk.old_lines else hunk.source_start - 1
        if start < position:
            raise PatchConflict(patch_name, file_patch.path, hunk.index, "hunks overlap or are out of order")
        found = lines[start : start + len(hunk.old_lines)]
        if tuple(found) != hunk.old_lines:
            raise PatchConflict(
                patch_name, file_patch.path, hunk.index,
                f"{hunk.header.strip()}: {_first_difference(hunk.old_lines, found, start)}",
            )
        result.extend(lines[position:start])
        result.extend(hunk.new_lines)
        position = start + len(hunk.old_lines)
    result.extend(lines[position:])
    if file_patch.new_path is None:
        if result and not file_patch.copy:
            raise PatchConflict(patch_name, file_patch.path, None, "the patch deletes this file, but it has other content")
        return None
    return "".join(result).encode("utf-8", "surrogateescape")


class _DiffError(ValueError):
    pass


_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADER = re.compile(r"^diff --git (a/[^\t\n]+) (b/[^\t\n]+)")


@dataclass
class _ParsedFile:
    """One file's part of a diff, as read: names as written (with their a/ b/ prefixes)."""
    start: int  # offset of its first line in the diff text
    source_file: str = ""
    target_file: str = ""
    info: list[str] = field(default_factory=list)  # "diff --git" and extended header lines
    hunks: list[Hunk] = field(default_factory=list)
    is_binary_file: bool = False
    span: tuple[int, int] = (0, 0)

    @property
    def path(self) -> str:
        for name in (self.target_file, self.source_file):
            if name and name != DEV_NULL:
                return name[2:] if name[:2] in ("a/", "b/") else name
        return ""

    @property
    def patch_info(self) -> list[str]:
        return self.info

    @property
    def is_rename(self) -> bool:
        return any(line.startswith(("rename from ", "rename to ")) for line in self.info)


def _parse_diff(text: str) -> list[_ParsedFile]:
    """The files of a unified diff, read line by line in one pass (no line is held twice: a
    large patch costs about its own size again in hunk lines, not a parse tree ten times it).

    A file starts at "diff --git", or at a "--- " line followed by "+++ " outside a git header;
    lines before the first file (a format-patch header) and between files (its signature) are
    ignored; a hunk's body is exactly as many lines as its header counts."""
    files: list[_ParsedFile] = []
    lines = _LINE.finditer(text)
    pending = None  # one line of look-ahead
    current: _ParsedFile | None = None
    named = False  # the current file has had its ---/+++ lines
    signature_seen = None  # the file after whose hunks a "-- " signature line came

    def take():
        nonlocal pending
        if pending is not None:
            match, pending = pending, None
            return match
        return next(lines, None)

    def peek():
        nonlocal pending
        if pending is None:
            pending = next(lines, None)
        return pending

    def finish(end: int) -> None:
        if current is not None:
            current.span = (current.start, end)
            if not current.source_file or not current.target_file:
                _names_from_git_header(current)
            files.append(current)

    while (match := take()) is not None:
        line = match.group()
        if line.startswith("diff --git "):
            finish(match.start())
            current, named = _ParsedFile(match.start(), info=[line]), False
        elif line.startswith("--- ") and (nxt := peek()) is not None and nxt.group().startswith("+++ ") and (current is None or not named or current.hunks):
            if current is None or current.hunks:
                finish(match.start())
                current = _ParsedFile(match.start())
            take()
            current.source_file, current.target_file, named = _file_name(line), _file_name(nxt.group()), True
        elif line.startswith("@@ ") and current is not None:
            current.hunks.append(_read_hunk(len(current.hunks) + 1, line, take, peek))
        elif current is not None and current.hunks and signature_seen is not current and line[:1] in ("+", "-", " "):
            if line.rstrip("\r\n") in ("--", "-- "):  # format-patch's signature: the rest is not diff
                signature_seen = current
            else:
                raise _DiffError(f"{line.rstrip()[:60]!r} after hunk {current.hunks[-1].header}: the hunk is longer than its header says")
        elif current is not None and not named and not current.hunks:
            current.info.append(line)
            if line.startswith(("Binary files ", "GIT binary patch")):
                current.is_binary_file = True
    finish(len(text))
    return files


def _file_name(line: str) -> str:
    return line[4:].rstrip("\n").rstrip("\r").split("\t", 1)[0]


def _names_from_git_header(parsed: _ParsedFile) -> None:
    """A file without ---/+++ lines (empty new file, mode change, pure rename or copy, binary)."""
    header = _GIT_HEADER.match(parsed.info[0]) if parsed.info else None
    source, target = (header.group(1), header.group(2)) if header else ("", "")
    for line in parsed.info:
        if line.startswith("new file mode "):
            source = DEV_NULL
        elif line.startswith("deleted file mode "):
            target = DEV_NULL
    parsed.source_file = parsed.source_file or source
    parsed.target_file = parsed.target_file or target
    if not parsed.source_file or not parsed.target_file:
        raise _DiffError(f"cannot tell the file names from {parsed.info[0].rstrip() if parsed.info else 'a file section'!r}")


def _read_hunk(index: int, header: str, take, peek) -> Hunk:
    found = _HUNK_HEADER.match(header)
    if not found:
        raise _DiffError(f"bad hunk header {header.rstrip()!r}")
    source_start, source_length = int(found.group(1)), int(found.group(2) or 1)
    target_start, target_length = int(found.group(3)), int(found.group(4) or 1)
    old: list[str] = []
    new: list[str] = []
    old_left, new_left, previous = source_length, target_length, None
    while old_left > 0 or new_left > 0:
        match = take()
        if match is None:
            raise _DiffError(f"hunk {header.rstrip()!r} is shorter than its header says")
        line = match.group()
        kind = line[0] if line[0] not in "\r\n" else " "  # a bare newline: an empty context line
        value = line[1:] if line[0] not in "\r\n" else line
        if kind == "\\":
            _no_newline(previous, old, new)
            continue
        if kind not in " -+":
            raise _DiffError(f"hunk {header.rstrip()!r}: expected a line starting with ' ', '-' or '+', got {line.rstrip()[:60]!r}")
        if kind in " -":
            old.append(value)
            old_left -= 1
        if kind in " +":
            new.append(value)
            new_left -= 1
        if old_left < 0 or new_left < 0:
            raise _DiffError(f"hunk {header.rstrip()!r} is longer than its header says")
        previous = kind
    following = peek()
    if following is not None and following.group().startswith("\\"):
        take()
        _no_newline(previous, old, new)
    header_text = f"@@ -{source_start},{source_length} +{target_start},{target_length} @@"
    return Hunk(index, source_start, source_length, tuple(old), tuple(new), header_text)


def _no_newline(previous: str | None, old: list[str], new: list[str]) -> None:
    """"\\ No newline at end of file" marks the line before it."""
    if previous in (" ", "-") and old:
        old[-1] = old[-1].removesuffix("\n")
    if previous in (" ", "+") and new:
        new[-1] = new[-1].removesuffix("\n")


def _target_start(hunk: Hunk) -> int:
    # Parsed hunks keep only source_start; recover the target start from the header.
    return int(hunk.header.split("+", 1)[1].split(",", 1)[0].split(" ", 1)[0])


def _strip_prefix(path: str, source: str) -> str | None:
    if path == DEV_NULL:
        return None
    path = path.split("\t", 1)[0]
    if path[:2] in ("a/", "b/"):
        return path[2:]
    raise InvalidInput(source, f"path {path!r} lacks the a/ or b/ prefix", hint="regenerate it with git format-patch (-p1 paths)")


def _extended_header(info: list[str], prefix: str) -> str | None:
    for line in info:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def _split_lines(data: bytes) -> list[str]:
    # Split on "\n" only: str.splitlines would also split on \r, \f and friends.
    return re.findall(r"[^\n]*\n|[^\n]+$", data.decode("utf-8", "surrogateescape"))


def _first_difference(expected: tuple[str, ...], found: list[str], start: int) -> str:
    for offset, want in enumerate(expected):
        if offset >= len(found):
            return f"the file ends at line {start + offset}, expected {want.rstrip()!r}"
        if found[offset] != want:
            return f"line {start + offset + 1} is {found[offset].rstrip()!r}, expected {want.rstrip()!r}"
    return "context differs"
