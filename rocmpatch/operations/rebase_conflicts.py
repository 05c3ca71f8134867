"""A stopped rebase's conflicts: what git left for each conflicted file, and whether it was resolved.

Only some conflicts leave markers. A file upstream deleted and the patch changed is left whole (the
patch's version of a file of another release), a binary one as upstream has it, with nothing in
either to say that nobody looked at it. So the stop records, per conflicted path, its kind (from the
index stages git gives it) and the blob the worktree got, and the worktree's index holds the path
unmerged, as `git merge` leaves it. `--continue` takes the worktree only when each path has no
conflict marker left and was either marked resolved there (`git add FILE` keeps it as it is,
`git rm FILE` leaves it out) or edited (its content, or its absence, differs from what the stop left).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd
from rocmpatch.errors import InvalidInput

CONTENT, BOTH_ADDED, DELETED_UPSTREAM, DELETED_BY_PATCH, OTHER = (
    "both changed", "both added", "deleted upstream", "deleted by the patch", "other")
# Which index stages git leaves (1: the base, 2: ours, upstream's side; 3: theirs, the patch's side).
_KINDS = {frozenset({1, 2, 3}): CONTENT, frozenset({2, 3}): BOTH_ADDED,
          frozenset({1, 3}): DELETED_UPSTREAM, frozenset({1, 2}): DELETED_BY_PATCH}
CONFLICT_MARKERS = ("<<<<<<< ", ">>>>>>> ")
RESOLVE_HINT = ("in that worktree, edit each file (no conflict marker left), or run 'git rm FILE' to leave it out or "
                "'git add FILE' to keep it as it is; then 'rocmpatch rebase --continue'")


@dataclass
class Conflict:
    path: str
    kind: str  # CONTENT, BOTH_ADDED, DELETED_UPSTREAM, DELETED_BY_PATCH or OTHER
    left: str | None = None  # the blob the stop left in the worktree; None: no file there


def conflicts_of(work: gitcmd.Repo, merged: gitcmd.MergeResult) -> list[Conflict]:
    return [Conflict(path, _KINDS.get(merged.stages_of(path), OTHER), _blob_in_tree(work, merged.tree, path))
            for path in merged.conflicts]


def refuse_unresolved(worktree: Path, patch: str, conflicts: list[Conflict]) -> None:
    """InvalidInput naming every conflicted file of the worktree not resolved yet, and the fix."""
    pending = gitcmd.unmerged_paths(worktree)
    problems = []
    for conflict in conflicts:
        path = worktree / conflict.path
        line = _marker_line(path)
        if line:
            problems.append(f"{conflict.path}:{line} (conflict marker)")
        elif conflict.path in pending and _blob_on_disk(path) == conflict.left:
            problems.append(f"{conflict.path} ({conflict.kind}, neither edited nor git add/rm)")
    if problems:
        raise InvalidInput(worktree, f"patch {patch} is not resolved: {'; '.join(problems)}", hint=RESOLVE_HINT)


def _blob_in_tree(work: gitcmd.Repo, tree: str, path: str) -> str | None:
    found = work.read_object(f"{tree}:{path}")
    return found[0] if found is not None and found[1] == "blob" else None


def _blob_on_disk(path: Path) -> str | None:
    """The blob id git would give the file (a symlink: its target), None when there is none."""
    if path.is_symlink():
        return gitcmd.blob_id(os.fsencode(os.readlink(path)))
    return gitcmd.blob_id(path.read_bytes()) if path.is_file() else None


def _marker_line(path: Path) -> int | None:
    if path.is_symlink() or not path.is_file():
        return None
    for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), start=1):
        if line.startswith(CONFLICT_MARKERS):
            return number
    return None
