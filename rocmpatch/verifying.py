"""`rocmpatch verify`: is the target byte for byte pin + series?

Fast path: HEAD's tree id equals the lock's patched_tree and `git status` is clean, which is two
git calls however large the tree. Only when that fails are paths compared, and only the paths
that differ are read, to say for each what happened to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, store, target
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
    not_based_on_pin: str | None = None  # what HEAD is based on instead, as one line

    @property
    def ok(self) -> bool:
        return not (self.differences or self.lock_problems or self.interrupted or self.not_based_on_pin)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "target": str(self.target),
            "expected_tree": self.expected_tree,
            "head_tree": self.head_tree,
            "interrupted": self.interrupted,
            "not_based_on_pin": self.not_based_on_pin,
            "lock_problems": self.lock_problems,
            "differences": [{"path": d.path, "kind": d.kind, "patches": d.patches} for d in self.differences],
        }


def verify(loaded: LoadedSeries, directory: Path, *, url_override: str | None = None) -> VerifyReport:
    lock = loaded.require_lock()
    repo = target.open_target(directory)
    head = gitcmd.head_commit(repo)
    head_tree = gitcmd.tree_of(repo, head) if head else None
    journal = target.pending(repo)
    report = VerifyReport(directory, lock.patched_tree, head_tree, lock_problems=loaded.lock_problems(),
                          interrupted=journal["operation"] if journal else None)
    pin = lock.upstream.commit
    state = history.read(repo, pin)
    pin_tree = lock.upstream.tree
    if state.base != pin:
        report.not_based_on_pin = f"HEAD ({head or 'no commit'}) is not based on the pin {lock.upstream.ref} ({pin})"
    else:
        pin_tree = gitcmd.tree_of(repo, pin)
        if pin_tree != lock.upstream.tree:
            report.lock_problems.append(f"{loaded.location.lock_path}: upstream.tree is {lock.upstream.tree}, but commit {pin} has tree {pin_tree}")
    dirty = [path for _, path in gitcmd.dirty_paths(repo)]
    if head_tree == lock.patched_tree and not dirty and report.ok:
        return report
    # Trees computed here go to a scratch repository: neither the target nor the cache is written.
    source = repo if gitcmd.has_object(repo, pin_tree) else store.cached_repo(lock.upstream, url_override)
    with store.scratch_over(source) as scratch:
        pin_entries = gitcmd.list_tree(scratch, pin_tree)
        patched = patch_trees(scratch, pin_tree, loaded.patches)[-1].tree if loaded.patches else pin_tree
        if patched != lock.patched_tree:
            report.lock_problems.append(f"{loaded.location.lock_path}: patched_tree is {lock.patched_tree}, but the series on the pin gives {patched}")
            report.expected_tree = patched
        expected = gitcmd.list_tree(scratch, patched)
    actual = gitcmd.list_tree(repo, head_tree) if head_tree else {}
    candidates = {p for p in expected.keys() | actual.keys() if expected.get(p) != actual.get(p)} | set(dirty)
    hashed = gitcmd.hash_files(repo, sorted(set(dirty)))
    touched = touched_by(loaded.patches)
    for path in sorted(candidates):
        now = hashed[path] if path in hashed else (actual[path].sha if path in actual else None)
        want = expected[path].sha if path in expected else None
        if now == want and (path in hashed or expected.get(path) == actual.get(path)):
            continue
        kind = _kind(path, now, want, pin_entries, touched, edited_here=path in hashed)
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
