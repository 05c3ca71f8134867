"""`rocmpatch verify`: is the target byte for byte pin + series?

Fast path: HEAD's tree id equals the lock's patched_tree and `git status` is clean, which is two
git calls however large the tree. Only when that fails are paths compared, and only the paths
that differ are read, to say for each what happened to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import git

from rocmpatch import gitcmd, store, target
from rocmpatch.schema import Lock
from rocmpatch.series import LoadedSeries
from rocmpatch.trees import patch_trees, touched_by

EDITED, DELETED, ADDED, PATCH_MISSING = "edited", "deleted", "added", "patch-missing"


@dataclass
class Difference:
    path: str
    kind: str  # edited | deleted | added | patch-missing
    patches: list[str] = field(default_factory=list)  # the series' patches touching this path


@dataclass
class VerifyReport:
    target: Path
    expected_tree: str
    head_tree: str | None
    differences: list[Difference] = field(default_factory=list)
    lock_problems: list[str] = field(default_factory=list)
    interrupted: str | None = None

    @property
    def ok(self) -> bool:
        return not (self.differences or self.lock_problems or self.interrupted)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "target": str(self.target),
            "expected_tree": self.expected_tree,
            "head_tree": self.head_tree,
            "interrupted": self.interrupted,
            "lock_problems": self.lock_problems,
            "differences": [{"path": d.path, "kind": d.kind, "patches": d.patches} for d in self.differences],
        }


def verify(loaded: LoadedSeries, directory: Path, *, url_override: str | None = None) -> VerifyReport:
    lock = loaded.require_lock()
    repo = gitcmd.open_repo(directory)
    head = gitcmd.head_commit(repo)
    head_tree = gitcmd.tree_of(repo, head) if head else None
    journal = target.pending(repo)
    report = VerifyReport(directory, lock.patched_tree, head_tree, lock_problems=loaded.lock_problems(),
                          interrupted=journal["operation"] if journal else None)
    dirty = [path for _, path in gitcmd.dirty_paths(repo)]
    if head_tree == lock.patched_tree and not dirty:
        return report
    expected, pin = _expected_entries(repo, loaded, lock, url_override)
    actual = gitcmd.list_tree(repo, head_tree) if head_tree else {}
    candidates = {p for p in expected.keys() | actual.keys() if expected.get(p) != actual.get(p)} | set(dirty)
    hashed = gitcmd.hash_files(repo, sorted(set(dirty)))
    touched = touched_by(loaded.patches)
    for path in sorted(candidates):
        now = hashed[path] if path in hashed else (actual[path].sha if path in actual else None)
        want = expected[path].sha if path in expected else None
        if now == want and (path in hashed or expected.get(path) == actual.get(path)):
            continue
        kind = _kind(path, now, want, pin, touched, edited_here=path in hashed)
        report.differences.append(Difference(path, kind, touched.get(path, [])))
    return report


def _kind(path: str, now: str | None, want: str | None, pin: dict[str, gitcmd.Entry], touched: dict[str, list[str]], *, edited_here: bool) -> str:
    """A change in the working tree is the user's; a committed file still at the pin lacks its patch."""
    at_pin = pin[path].sha if path in pin else None
    if not edited_here and path in touched and now == at_pin:
        return PATCH_MISSING
    if want is None:
        return ADDED
    if now is None:
        return DELETED
    return EDITED


def _expected_entries(repo: git.Repo, loaded: LoadedSeries, lock: Lock, url_override: str | None):
    """Entries of the patched tree and of the pin tree, computed only when not already at hand."""
    source = repo if gitcmd.has_object(repo, lock.upstream.tree) else store.cached_repo(lock.upstream, url_override)
    pin = gitcmd.list_tree(source, lock.upstream.tree)
    patched = lock.patched_tree
    if not gitcmd.has_object(source, patched):
        # Not applied here yet (or the lock is stale, reported separately): compute it.
        patched = patch_trees(source, lock.upstream.tree, loaded.patches)[-1].tree
    return gitcmd.list_tree(source, patched), pin
