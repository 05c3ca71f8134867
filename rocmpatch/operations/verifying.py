"""`rocmpatch verify`: is the target byte for byte pin + series?

Compared is what git compares: content, mode (executable or not) and type (file, symlink,
nested repository) of every path. The working tree is hashed whole into a temporary index and
object directory (`git add -A`; the target is not written), so neither the target's index nor its
flags (assume-unchanged, skip-worktree) nor its configuration (core.fileMode=false, an fsmonitor)
can hide a change: HEAD's tree equal to the lock's patched_tree, and the working tree's tree id to
HEAD's, is the answer yes. Otherwise paths are compared entry by entry, to say for each what
happened to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, store, target
from rocmpatch.errors import RocmpatchError
from rocmpatch.series import LoadedSeries
from rocmpatch.trees import patch_trees, touched_by

EDITED, DELETED, ADDED, PATCH_MISSING = "edited", "deleted", "added", "patch-missing"
MODE_CHANGED, TYPE_CHANGED = "mode-changed", "type-changed"
_FILE_MODES = (0o100644, 0o100755)


@dataclass
class Difference:
    path: str
    kind: str  # edited | deleted | added | patch-missing | mode-changed | type-changed
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
    if head_tree == lock.patched_tree and report.ok and _worktree_is(repo, head_tree):
        return report
    # Untracked nested repositories ("?? dir/") cannot be hashed into a tree: reported as added.
    nested = [path for code, path in gitcmd.dirty_paths(repo) if code == "??" and path.endswith("/")]
    now_entries = gitcmd.snapshot_entries(repo, leave_out=nested)
    actual = gitcmd.list_tree(repo, head_tree) if head_tree else {}
    # Trees computed here go to a scratch repository: neither the target nor the cache is written.
    source = repo if gitcmd.has_object(repo, pin_tree) else store.cached_repo(lock.upstream, url_override)
    with store.scratch_over(source) as scratch:
        pin_entries = gitcmd.list_tree(scratch, pin_tree)
        patched = patch_trees(scratch, pin_tree, loaded.patches)[-1].tree if loaded.patches else pin_tree
        if patched != lock.patched_tree:
            report.lock_problems.append(f"{loaded.location.lock_path}: patched_tree is {lock.patched_tree}, but the series on the pin gives {patched}")
            report.expected_tree = patched
        expected = gitcmd.list_tree(scratch, patched)
    touched = touched_by(loaded.patches)
    for path in sorted(expected.keys() | now_entries.keys()):
        now, want = now_entries.get(path), expected.get(path)
        if now == want:
            continue
        kind = _kind(path, now, want, pin_entries, touched, edited_here=now != actual.get(path))
        report.differences.append(Difference(path, kind, touched.get(path, [])))
    report.differences += [Difference(path.rstrip("/"), ADDED) for path in nested]
    return report


def _worktree_is(repo, tree: str) -> bool:
    """The quick answer for the common case: the working tree, snapshot whole, has exactly this
    tree id (a nested repository is recorded as a gitlink, so it differs; one without commits
    cannot be recorded: then the caller looks path by path)."""
    try:
        return gitcmd.snapshot_tree(repo) == tree
    except RocmpatchError:
        return False


def _kind(path: str, now: gitcmd.Entry | None, want: gitcmd.Entry | None, pin: dict[str, gitcmd.Entry], touched: dict[str, list[str]], *, edited_here: bool) -> str:
    """A change in the working tree is the user's; a committed file still at the pin lacks its patch."""
    if not edited_here and path in touched and now == pin.get(path):
        return PATCH_MISSING
    if want is None:
        return ADDED
    if now is None:
        return DELETED
    if now.mode != want.mode and not (now.mode in _FILE_MODES and want.mode in _FILE_MODES):
        return TYPE_CHANGED
    if now.sha == want.sha:
        return MODE_CHANGED
    return EDITED
