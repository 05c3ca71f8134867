"""History walking (drift): first-parent lines, merge bases, and what commits changed on given paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from rocmpatch.errors import UpstreamError
from rocmpatch.gitcmd.core import Repo, run, run_bytes


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parent: str | None  # the first parent; None for a root commit
    date: str  # committer date, ISO 8601
    subject: str


@dataclass(frozen=True)
class PathChange:
    path: str
    mode: int  # 0 when the commit deletes the path
    sha: str | None  # None when the commit deletes the path


def merge_base(repo: Repo, a: str, b: str) -> str | None:
    try:
        return run(repo, "merge-base", a, b) or None
    except UpstreamError:
        return None  # unrelated histories


def is_ancestor(repo: Repo, ancestor: str, descendant: str) -> bool:
    try:
        run(repo, "merge-base", "--is-ancestor", ancestor, descendant)
        return True
    except UpstreamError:
        return False


def first_parent_line(repo: Repo, start: str, end: str) -> list[str]:
    """Commits on `end`'s first-parent line after `start`, oldest first."""
    return run(repo, "rev-list", "--first-parent", "--reverse", f"{start}..{end}").split()


def commit_info(repo: Repo, rev: str) -> CommitInfo:
    out = run(repo, "log", "-1", "--no-walk", "--format=%H%x00%P%x00%cI%x00%s", rev, "--")
    return _parse_commit_line(out)


def _parse_commit_line(line: str) -> CommitInfo:
    sha, parents, date, subject = line.split("\0", 3)
    return CommitInfo(sha, parents.split()[0] if parents else None, date, subject)


def path_history(repo: Repo, start: str, end: str, paths: Iterable[str]) -> list[tuple[CommitInfo, list[PathChange]]]:
    """The commits on `end`'s first-parent line after `start` that change any of `paths`, oldest
    first, each with what it changed there relative to its first parent (merges included)."""
    out = run_bytes(
        repo, "log", "--first-parent", "--diff-merges=first-parent", "--reverse", "--raw", "-z",
        "--no-abbrev", "--no-renames", "--format=%x01%H%x00%P%x00%cI%x00%s", f"{start}..{end}", "--", *paths,
    )
    history: list[tuple[CommitInfo, list[PathChange]]] = []
    for block in out.split(b"\x01")[1:]:
        # A block: header fields NUL-separated, a newline, then ":mode mode sha sha S\0path\0" records.
        header, _, raw = block.partition(b"\n")
        info = _parse_commit_line(header.decode("utf-8", "surrogateescape").strip("\0"))
        fields = raw.lstrip(b"\n\0").split(b"\0")
        changes = []
        for meta, path in zip(fields[0::2], fields[1::2]):
            if not meta.startswith(b":"):
                continue
            _old_mode, new_mode, _old_sha, new_sha, _status = meta[1:].decode().split(" ")
            deleted = int(new_mode, 8) == 0
            changes.append(PathChange(path.decode("utf-8", "surrogateescape"), int(new_mode, 8), None if deleted else new_sha))
        history.append((info, changes))
    return history


@dataclass(frozen=True)
class Rename:
    status: str  # "R" renamed, "D" deleted
    old_path: str
    new_path: str | None
    similarity: int | None


def renames_between(repo: Repo, old: str, new: str, paths: Iterable[str]) -> dict[str, Rename]:
    """What became of `paths` between two commits, by git's rename detection (-M)."""
    wanted = set(paths)
    out = run_bytes(repo, "diff-tree", "-r", "-z", "-M", "-l0", "--no-commit-id", "--name-status", old, new)
    fields = out.split(b"\0")
    found: dict[str, Rename] = {}
    index = 0
    while index < len(fields) and fields[index]:
        status = fields[index].decode()
        if status.startswith(("R", "C")):
            source, target = (f.decode("utf-8", "surrogateescape") for f in fields[index + 1 : index + 3])
            if status[0] == "R" and source in wanted:
                found[source] = Rename("R", source, target, int(status[1:] or 0))
            index += 3
            continue
        path = fields[index + 1].decode("utf-8", "surrogateescape")
        if status == "D" and path in wanted:
            found.setdefault(path, Rename("D", path, None, None))
        index += 2
    return found
