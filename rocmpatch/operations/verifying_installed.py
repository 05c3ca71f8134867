"""`rocmpatch verify --installed`: is the megatron package a Python imports byte for byte the
patched tree of a pinned release (plus an overlay)?

Where the package lives is asked of the interpreter (rocmpatch.installed.locate: no code of
Megatron's runs); its files are read and hashed here (rocmpatch.snapshot) and compared with the
locked patched tree, restricted to the directories the interpreter imports (megatron/core,
megatron/training, ...; the whole megatron/ for a regular package). The tree's listing is taken
only when it hashes to the locked tree id (as verify's answer is a tree id computed here), so a
tree object swapped in the cache cannot make a yes. What is compared and why:
- every file found there must be in the tree with the same bytes (else `edited`, or `added`);
  `__pycache__/` and compiled extension modules (the dataset helpers the build makes from the
  tree's helpers.cpp) are left out and counted, but a compiled module that Python would import
  instead of one of the tree's modules (`x.cpython-311-*.so` beside `x.py`) is `shadowing`;
- a checkout's own directory (an editable install, or PYTHONPATH pointing at the tree) must hold
  every file of the tree there (else `deleted`), modes included, as `verify --target` demands;
- an installed copy (site-packages) holds what the package build installs: every module of every
  package of the tree (a directory whose parents up to megatron/ all have __init__.py: what
  setuptools' find_packages takes) is compared, so a missing one is `deleted`; the tree's other
  files (READMEs, Makefiles, .cpp sources, data the build is not told to take, modules outside
  packages) are `not installed`: listed, not counted as differences. pip sets an installed file's
  mode itself, so modes are not compared there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

from rocmpatch import gitcmd, installed, snapshot, store
from rocmpatch.errors import UpstreamError
from rocmpatch.gitcmd import SYMLINK_MODE, Entry
from rocmpatch.operations.verifying import ADDED, DELETED, EDITED, MODE_CHANGED, TYPE_CHANGED, UNREADABLE, Difference
from rocmpatch.series import LoadedSeries
from rocmpatch.trees import lock_mismatches, patch_trees, touched_by

PYCACHE = "__pycache__"
SHADOWING = "shadowing"  # a compiled module imported instead of the tree's source module
NOT_INSTALLED = "not-installed"


@dataclass
class PartReport:
    prefix: str  # megatron/core, or megatron for a regular package
    path: str
    checkout: bool
    files: int = 0  # files compared


@dataclass
class InstalledReport:
    python: str
    executable: str
    version: str
    release: str
    overlay: str | None
    expected_tree: str
    parts: list[PartReport] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # other packages in the megatron namespace, not compared
    differences: list[Difference] = field(default_factory=list)
    not_installed: list[str] = field(default_factory=list)  # tree files the package build leaves out
    compiled: list[str] = field(default_factory=list)  # compiled extension modules left out
    pycache: int = 0  # __pycache__ directories left out
    lock_problems: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # the releases compared with, when none was named
    not_cached: list[str] = field(default_factory=list)  # the releases not compared: never applied here

    @property
    def found(self) -> bool:
        return bool(self.parts)

    @property
    def ok(self) -> bool:
        return self.found and not (self.differences or self.lock_problems)

    def to_json(self) -> dict:
        return {
            "ok": self.ok, "python": self.python, "executable": self.executable, "python_version": self.version,
            "release": self.release, "overlay": self.overlay, "expected_tree": self.expected_tree, "found": self.found,
            "parts": [{"prefix": p.prefix, "path": p.path, "checkout": p.checkout, "files": p.files} for p in self.parts],
            "other_packages": self.others, "lock_problems": self.lock_problems, "candidates": self.candidates, "not_cached": self.not_cached,
            "not_compared": {"pycache_dirs": self.pycache, "compiled": self.compiled, "not_installed": self.not_installed},
            "differences": [{"path": d.path, "kind": d.kind, "patches": d.patches} for d in self.differences],
        }


def verify_installed(candidates: list[LoadedSeries], python: str, *, url_override: str | None = None) -> InstalledReport:
    """The report for the first candidate (a release, with its overlay) the package is exactly;
    else for the one it differs from least. Of several candidates (no release named), only those
    whose pin is in rocmpatch's cache (a release applied on this machine) are compared, unless
    none is: nothing is fetched to try a release that was never applied here."""
    cached = [loaded for loaded in candidates if store.commit_path(loaded.require_lock().upstream.commit).is_dir()]
    ordered = cached if len(candidates) > 1 and cached else candidates
    located: dict[tuple[str, ...], installed.Located] = {}
    reports = []
    for loaded, (tree, listing, problems) in zip(ordered, _expected_trees(ordered, url_override)):
        names = _part_names(listing)
        if names not in located:
            located[names] = installed.locate(python, list(names))
        report = compare(located[names], loaded, tree, listing)
        report.lock_problems = problems
        reports.append(report)
        if report.ok:
            break
    report = reports[-1] if reports[-1].ok else min(reports, key=lambda r: (not r.found, len(r.differences) + len(r.lock_problems)))
    if len(candidates) > 1:
        report.candidates = [loaded.location.release for loaded in ordered[:len(reports)]]
        report.not_cached = [loaded.location.release for loaded in candidates if not any(loaded is taken for taken in ordered)]
    return report


def _expected_trees(candidates: list[LoadedSeries], url_override: str | None) -> Iterator[tuple[str, dict[str, Entry], list[str]]]:
    for loaded in candidates:  # one at a time: a later candidate is fetched only when asked for
        yield expected_tree(loaded, url_override)


def expected_tree(loaded: LoadedSeries, url_override: str | None = None) -> tuple[str, dict[str, Entry], list[str]]:
    """The stack's patched tree (the lock's, or the overlay lock's): its id, its listing, and what
    is wrong with the locks. Read from the cache, where `apply` keeps it; computed (in a scratch
    repository, nothing written to the cache) when no target was made from this cache entry yet."""
    lock = loaded.require_lock()
    problems = loaded.lock_problems()
    cache = store.cached_repo(lock.upstream, url_override)
    with store.scratch_over(cache) as scratch:
        tree = loaded.patched_tree
        if problems or not gitcmd.has_object(scratch, tree):
            steps = patch_trees(scratch, lock.upstream.tree, loaded.patches)
            problems += lock_mismatches(loaded, steps)
            tree = steps[-1].tree if steps else lock.upstream.tree
        listing = gitcmd.list_tree(scratch, tree)
    if snapshot.tree_id(listing) != tree:  # what is compared is exactly the tree named, or nothing
        raise UpstreamError(f"{gitcmd.git_dir(cache)}: the cache entry's tree {tree} does not hash to its id; nothing was compared",
                            hint=f"delete {gitcmd.git_dir(cache)} and run 'rocmpatch fetch' again")
    return tree, listing, problems


def _part_names(listing: dict[str, Entry]) -> tuple[str, ...]:
    """The tree's directories under megatron/ (core, training, ...): what a namespace may hold."""
    prefix = installed.PACKAGE + "/"
    return tuple(sorted({path.split("/")[1] for path in listing if path.startswith(prefix) and path.count("/") >= 2}))


def compare(located: installed.Located, loaded: LoadedSeries, tree: str, listing: dict[str, Entry]) -> InstalledReport:
    """The package as `located` found it against the tree `listing` (path -> entry)."""
    report = InstalledReport(located.python, located.executable, located.version, loaded.location.release,
                             str(loaded.overlay.directory) if loaded.overlay else None, tree, others=list(located.others))
    touched = touched_by(loaded.patches)
    for part in located.parts:
        prefix = part.prefix + "/"
        want = {path[len(prefix):]: entry for path, entry in listing.items() if path.startswith(prefix)}
        if not want:
            report.others.append(str(part.path))  # megatron.X that the tree does not have
            continue
        left_out: list[str] = []
        now = snapshot.take(part.path, want, _left_out(located.extension_suffixes, left_out))
        report.parts.append(PartReport(part.prefix, str(part.path), part.checkout, len(now.entries)))
        packages, before = _packages(want), len(report.differences)
        unreadable = set(now.unreadable)
        for path in left_out:
            if os.path.basename(path) == PYCACHE:
                report.pycache += 1
            elif (shadowed := _shadowed(path, want, located.extension_suffixes)) is not None:
                report.differences.append(Difference(prefix + path, SHADOWING, touched.get(prefix + shadowed, [])))
            else:
                report.compiled.append(prefix + path)
        for path in sorted(want.keys() | now.entries.keys()):
            if path in unreadable:
                continue
            kind = _kind(part, path, now.entries.get(path), want.get(path), packages)
            if kind == NOT_INSTALLED:
                report.not_installed.append(prefix + path)
            elif kind is not None:
                report.differences.append(Difference(prefix + path, kind, touched.get(prefix + path, [])))
        report.differences += [Difference(prefix + path, UNREADABLE, touched.get(prefix + path, [])) for path in sorted(unreadable)]
        if part.checkout and len(report.differences) == before and now.tree != snapshot.tree_id(want):
            # Every path compared equal, yet the tree ids differ: never a yes (as verify --target).
            report.lock_problems.append(f"{part.path}: its tree id is {now.tree}, not the tree's {snapshot.tree_id(want)}")
    return report


def _packages(want: dict[str, Entry]) -> set[str]:
    """The directories of the part (relative; "" is its top) that setuptools installs as packages:
    each has an __init__.py, and so has every directory above it up to the top."""
    with_init = {path.rpartition("/")[0] for path in want if path.rpartition("/")[2] == "__init__.py"}
    return {d for d in with_init if all(parent in with_init for parent in _parents(d))}


def _parents(directory: str) -> Iterator[str]:
    while directory:
        directory = directory.rpartition("/")[0]
        yield directory


def _kind(part: installed.Part, path: str, now: Entry | None, want: Entry | None, packages: set[str]) -> str | None:
    if now == want:
        return None
    if want is None:
        return ADDED
    if now is None:
        if part.checkout or (path.endswith(".py") and path.rpartition("/")[0] in packages):
            return DELETED  # the build installs every module of every package
        return NOT_INSTALLED
    if (now.mode == SYMLINK_MODE) != (want.mode == SYMLINK_MODE):
        return TYPE_CHANGED
    if now.sha != want.sha:
        return EDITED
    return MODE_CHANGED if part.checkout else None  # pip chooses an installed file's mode


def _shadowed(path: str, want: dict[str, Entry], suffixes: tuple[str, ...]) -> str | None:
    """The tree's module (x.py, or the package x/) that the compiled module `path` is imported
    instead of: Python's file finder tries extension modules before sources. None when none."""
    directory, _, name = path.rpartition("/")
    suffix = max((s for s in suffixes if name.endswith(s)), key=len, default=None)
    if suffix is None:
        return None
    stem = f"{directory}/{name[:-len(suffix)]}" if directory else name[:-len(suffix)]
    for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
        if candidate in want:
            return candidate
    return None


def _left_out(extension_suffixes: tuple[str, ...], found: list[str]) -> snapshot.Ignored:
    """What is not compared: __pycache__ directories and compiled extension modules (the suffixes
    the interpreter imports them by). Collects them into `found`."""
    def ignored(paths: list[str]) -> set[str]:
        left = {path for path in paths if os.path.basename(path) == PYCACHE or path.endswith(extension_suffixes)}
        found.extend(sorted(left))
        return left

    return ignored
