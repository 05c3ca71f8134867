"""Parse unified diffs and apply them exactly, in memory.

"Exactly" means what `rocmpatch apply` promises: every hunk's old lines must sit at the
line number the hunk names, with no fuzz and no offset. Working on bytes in memory (not on
a checkout) is what lets apply be atomic and lets check and drift test a patch against git
blobs without touching a working tree.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

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
    text: str  # this file's section of the diff, usable as a patch on its own
    copy: bool = False  # a git copy: old_path stays (a reversed copy removes new_path again)

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
            return FilePatch(self.new_path, None, hunks, REGULAR_MODE, self.text, copy=True)
        return FilePatch(self.new_path, self.old_path, hunks, REGULAR_MODE, self.text)


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
        patch_set = PatchSet(text)
    except UnidiffParseError as exc:
        raise InvalidInput(source, f"not a valid unified diff: {exc}", hint="regenerate it with git format-patch") from exc
    if not len(patch_set):
        raise InvalidInput(source, "contains no file changes", hint="regenerate it with git format-patch")
    raw_lines = _split_lines(text.encode("utf-8", "surrogateescape"))
    files = []
    for patched in patch_set:
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
        hunks = tuple(_convert_hunk(i, h, raw_lines) for i, h in enumerate(patched, start=1))
        if new_mode == SYMLINK_MODE:
            check_symlink_target(new_path or "", "".join(line for h in hunks for line in h.new_lines), source)
        files.append(
            FilePatch(
                old_path=old_path,
                new_path=new_path,
                hunks=hunks,
                new_mode=new_mode,
                text=_file_section(str(patched)),
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


def apply_patch(patch: Patch, read: Reader) -> dict[str, bytes | None]:
    """Apply `patch` to the files `read` returns; return {path: new bytes, or None if deleted}.

    `read(path)` returns a file's bytes, or None when the file does not exist. Later files in
    the same patch see the results of earlier ones. Raises PatchConflict on the first mismatch.
    """
    changes: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        return changes[path] if path in changes else read(path)

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


def apply_series(patches: list[Patch], read: Reader) -> dict[str, bytes | None]:
    """Apply patches in order; return the combined changes relative to `read`."""
    changes: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        return changes[path] if path in changes else read(path)

    for patch in patches:
        changes.update(apply_patch(patch, current))
    return changes


def files_under(patch: Patch, prefixes: tuple[str, ...]) -> Patch:
    """The part of `patch` that touches only paths under `prefixes` (tests against partial trees)."""
    kept = tuple(f for f in patch.files if all(p.startswith(prefixes) for p in f.paths))
    return Patch(patch.name, patch.source, kept)


def _convert_hunk(index: int, hunk, raw_lines: list[str]) -> Hunk:
    # unidiff drops "\r" from line values; take each line's bytes from the raw diff instead.
    old: list[str] = []
    new: list[str] = []
    previous = None
    for line in hunk:
        kind = line.line_type
        if kind == "\\":  # "\ No newline at end of file" applies to the line before it (unidiff gives it no line number)
            if previous in (" ", "-") and old:
                old[-1] = old[-1].removesuffix("\n")
            if previous in (" ", "+") and new:
                new[-1] = new[-1].removesuffix("\n")
            continue
        if line.diff_line_no is None:  # unidiff's placeholder for a blank line after the hunk
            continue
        value = raw_lines[line.diff_line_no - 1][1:]
        if kind in (" ", "-"):
            old.append(value)
        if kind in (" ", "+"):
            new.append(value)
        previous = kind
    header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    return Hunk(index, hunk.source_start, hunk.source_length, tuple(old), tuple(new), header)


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


def _file_section(section: str) -> str:
    """This file's diff text from its "diff --git" line on (the format-patch preamble dropped)."""
    start = section.find("diff --git ")
    return section[start:] if start > 0 else section


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


def read_from_mapping(files: Mapping[str, bytes]) -> Reader:
    return files.get
