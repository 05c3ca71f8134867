"""`rocmpatch verify`: is the target byte for byte pin + series (+ an overlay's series)?

Compared is what git compares: content, mode (executable or not) and type (file, symlink,
nested repository) of every path. The answer comes only from bytes rocmpatch reads itself: the
working tree is walked and hashed here (rocmpatch.snapshot), and its tree id computed here, so
nothing of the target's own git state can hide a change: not its index (entries, flags,
cache-tree), attributes (eol, filters, core.autocrlf), replace refs, sparse-checkout or case
settings, nor its configuration. A file is read again unless rocmpatch's own stat cache
(rocmpatch.statcache, kept outside the target) proves it unchanged. HEAD's tree equal to the
lock's patched_tree, and the working tree's tree id to HEAD's, is the answer yes. Otherwise paths
are compared entry by entry, to say for each what happened to it. Nothing is written, in the
target or the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, snapshot, statcache, store, target
from rocmpatch.series import LoadedSeries
from rocmpatch.trees import escaping_symlinks, lock_mismatches, patch_trees, touched_by

EDITED, DELETED, ADDED, PATCH_MISSING = "edited", "deleted", "added", "patch-missing"
MODE_CHANGED, TYPE_CHANGED = "mode-changed", "type-changed"
UNREADABLE, IGNORED = "unreadable", "ignored"
_FILE_MODES = (0o100644, 0o100755)


@dataclass
class Difference:
    path: str
    kind: str  # edited | deleted | added | patch-missing | mode-changed | type-changed | unreadable | ignored
    patches: list[str] = field(default_factory=list)  # the series' patches touching this path
    detail: str | None = None  # verify --installed: what the interpreter would import instead, and why


@dataclass
class VerifyReport:
    target: Path
    expected_tree: str
    head_tree: str | None
    differences: list[Difference] = field(default_factory=list)
    lock_problems: list[str] = field(default_factory=list)
    interrupted: str | None = None
    not_based_on_pin: str | None = None  # what HEAD is based on instead, as one line
    strict: bool = False  # ignored files Python could import are differences too

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
            "strict": self.strict,
            "lock_problems": self.lock_problems,
            "differences": [{"path": d.path, "kind": d.kind, "patches": d.patches} for d in self.differences],
        }


def verify(loaded: LoadedSeries, directory: Path, *, url_override: str | None = None, strict: bool = False) -> VerifyReport:
    lock = loaded.require_lock()
    repo = target.open_target(directory)
    head = gitcmd.head_commit(repo)
    head_tree = gitcmd.tree_of(repo, head) if head else None
    journal = target.pending(repo)
    expected_tree = loaded.patched_tree  # the overlay's, when one is stacked on the series
    report = VerifyReport(directory, expected_tree, head_tree, lock_problems=loaded.lock_problems(),
                          interrupted=journal["operation"] if journal else None, strict=strict)
    pin = lock.upstream.commit
    state = history.read(repo, pin)
    pin_tree = lock.upstream.tree
    if state.base != pin:
        report.not_based_on_pin = f"HEAD ({head or 'no commit'}) is not based on the pin {lock.upstream.ref} ({pin})"
    else:
        pin_tree = gitcmd.tree_of(repo, pin)
        if pin_tree != lock.upstream.tree:
            report.lock_problems.append(f"{loaded.location.lock_path}: upstream.tree is {lock.upstream.tree}, but commit {pin} has tree {pin_tree}")
    root = Path(repo.working_tree_dir)
    cached = statcache.load(root)
    ignored = snapshot.ignored_by_git(repo)
    guide = cached.files if cached is not None and cached.tree == expected_tree else None
    if guide is None and gitcmd.has_object(repo, expected_tree):
        guide = gitcmd.list_tree(repo, expected_tree)
    now = snapshot.take(root, guide, ignored, cached=cached, strict=strict) if guide is not None else None
    if (now is not None and now.tree == expected_tree and head_tree == expected_tree and report.ok
            and not now.importable_ignored and not escaping_symlinks(now.links)):
        return report
    actual = gitcmd.list_tree(repo, head_tree) if head_tree else {}
    # Trees computed here go to a scratch repository: neither the target nor the cache is written.
    source = repo if gitcmd.has_object(repo, pin_tree) else store.cached_repo(lock.upstream, url_override)
    with store.scratch_over(source) as scratch:
        pin_entries = gitcmd.list_tree(scratch, pin_tree)
        steps = patch_trees(scratch, pin_tree, loaded.patches)
        patched = steps[-1].tree if steps else pin_tree
        mismatches = lock_mismatches(loaded, steps)
        if mismatches:
            report.lock_problems += mismatches
            report.expected_tree = patched
        expected = gitcmd.list_tree(scratch, patched)
    if now is None or guide.keys() != expected.keys():  # the walk is guided by the tree it is compared with
        now = snapshot.take(root, expected, ignored, cached=cached, strict=strict)
    touched = touched_by(loaded.patches)
    unreadable = set(now.unreadable)
    for path in sorted(expected.keys() | now.entries.keys()):
        current, want = now.entries.get(path), expected.get(path)
        if path in unreadable or _under(path, unreadable):
            continue
        if current == want:
            continue
        kind = _kind(path, current, want, pin_entries, touched, edited_here=current != actual.get(path))
        report.differences.append(Difference(path, kind, touched.get(path, [])))
    report.differences += [Difference(path, UNREADABLE, touched.get(path, [])) for path in sorted(unreadable)]
    report.differences += [Difference(path, IGNORED) for path in now.importable_ignored]
    if report.ok and now.tree != report.expected_tree:
        # Every path compared equal, yet the tree ids differ: never a yes.
        report.lock_problems.append(f"{directory}: the working tree's tree id is {now.tree}, not {report.expected_tree}")
    return report


def _under(path: str, directories: set[str]) -> bool:
    end = path.rfind("/")
    while end > 0:
        if path[:end] in directories:
            return True
        end = path.rfind("/", 0, end)
    return "" in directories


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
