"""`rocmpatch verify --installed`: is what a Python imports for `megatron` byte for byte the
patched tree of a pinned release (plus an overlay)?

What the interpreter would load for every module of the tree is asked of it (rocmpatch.installed:
the import system's own resolution, no code of Megatron's runs); the files are read and hashed
here (rocmpatch.snapshot) and compared with the locked patched tree. The tree's listing is taken
only when it hashes to the locked tree id (as verify's answer is a tree id computed here), so a
tree object swapped in the cache cannot make a yes. A yes needs both halves:
- the import system's answer for every module of the tree: Python's own source loader for that
  name, from a file whose bytes are the tree's (else `shadowing`: a compiled module, sourceless
  bytecode, a module where the tree has a package or the reverse, another file of an earlier path
  entry; or `unverifiable`: a meta-path or path hook's loader, a module already imported at
  start-up, a finder that fails); a directory without __init__.py must stay a namespace package;
- the directories it imports from (megatron/core, megatron/training, ...; the whole megatron/ for a
  regular package), walked: every file found there must be in the tree with the same bytes (else
  `edited`, or `added`); `__pycache__/` and compiled extension modules that replace no module of the
  tree (the dataset helpers the build makes from helpers.cpp) are left out and counted;
  a checkout's own directory (an editable install, or PYTHONPATH pointing at the tree) must hold
  every file of the tree (else `deleted`), modes included, as `verify --target` demands; an
  installed copy (site-packages) holds what the package build installs: every module of every
  package of the tree (a directory whose parents up to megatron/ all have __init__.py: what
  setuptools' find_packages takes), so a missing one is `deleted`; the tree's other files (READMEs,
  Makefiles, .cpp sources, data the build is not told to take) are `not installed`: listed, not
  counted. pip sets an installed file's mode itself, so modes are not compared there.
A part the interpreter does not find is `deleted` when it must be there: megatron/core always, every
part for a checkout, and every part a *.dist-info/RECORD beside the package lists.
With strict, the bytecode Python would run instead of compiling a module's source (a
`__pycache__/*.pyc` whose header it accepts: a matching timestamp, any unchecked-hash one) must be
that source's own code, compared as code objects compiled by the interpreter (else `bytecode`).
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
SHADOWING = "shadowing"  # something other than the tree's module is what `import` loads
UNVERIFIABLE = "unverifiable"  # loaded by something rocmpatch cannot read as a file of the tree
BYTECODE = "bytecode"  # with strict: bytecode that would run instead of the module's source
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
    strict: bool = False
    parts: list[PartReport] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # other packages in the megatron namespace, not compared
    differences: list[Difference] = field(default_factory=list)
    not_installed: list[str] = field(default_factory=list)  # tree files the package build leaves out
    compiled: list[str] = field(default_factory=list)  # compiled extension modules left out
    pycache: int = 0  # __pycache__ directories left out (with strict, the bytecode Python would load is checked)
    modules: int = 0  # modules of the tree whose import was resolved
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
            "strict": self.strict, "modules": self.modules,
            "parts": [{"prefix": p.prefix, "path": p.path, "checkout": p.checkout, "files": p.files} for p in self.parts],
            "other_packages": self.others, "lock_problems": self.lock_problems, "candidates": self.candidates, "not_cached": self.not_cached,
            "not_compared": {"pycache_dirs": self.pycache, "compiled": self.compiled, "not_installed": self.not_installed},
            "differences": [{"path": d.path, "kind": d.kind, "patches": d.patches, "detail": d.detail} for d in self.differences],
        }


def verify_installed(candidates: list[LoadedSeries], python: str, *, url_override: str | None = None, strict: bool = False) -> InstalledReport:
    """The report for the first candidate (a release, with its overlay) the package is exactly;
    else for the one it differs from least. Of several candidates (no release named), only those
    whose pin is in rocmpatch's cache (a release applied on this machine) are compared, unless
    none is: nothing is fetched to try a release that was never applied here."""
    cached = [loaded for loaded in candidates if store.commit_path(loaded.require_lock().upstream.commit).is_dir()]
    ordered = cached if len(candidates) > 1 and cached else candidates
    located: dict[tuple[str, ...], installed.Located] = {}
    reports = []
    for loaded, (tree, listing, problems) in zip(ordered, _expected_trees(ordered, url_override)):
        modules = installed.tree_modules(listing)
        names = tuple(modules)
        if names not in located:
            located[names] = installed.locate(python, list(names), list(_part_names(listing)))
        report = compare(located[names], loaded, tree, listing, strict=strict)
        report.lock_problems = problems + report.lock_problems
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


def compare(located: installed.Located, loaded: LoadedSeries, tree: str, listing: dict[str, Entry], *, strict: bool = False) -> InstalledReport:
    """The package as `located` found it against the tree `listing` (path -> entry)."""
    report = InstalledReport(located.python, located.executable, located.version, loaded.location.release,
                             str(loaded.overlay.directory) if loaded.overlay else None, tree, strict=strict, others=list(located.others))
    touched = touched_by(loaded.patches)

    def differ(path: str, kind: str, detail: str | None = None) -> None:
        if path not in reported:
            reported.add(path)
            report.differences.append(Difference(path, kind, touched.get(path, []), detail))

    reported: set[str] = set()
    modules = installed.tree_modules(listing)
    report.modules = len(modules)
    accepted = _check_resolution(located, modules, listing, differ)
    for part in located.parts:
        _compare_part(report, part, located, listing, touched, differ)
    _require_parts(located, listing, differ)
    if strict and report.found:
        _check_bytecode(located, accepted, differ)
    report.compiled = [path for path in report.compiled if path not in reported]
    report.differences.sort(key=lambda d: d.path)
    return report


def _check_resolution(located: installed.Located, modules: dict[str, installed.TreeModule], listing: dict[str, Entry], differ) -> dict[str, str]:
    """Differences between what `import` loads for each module of the tree and the tree itself
    (see the module docstring); returns the source files accepted (module name -> file)."""
    accepted: dict[str, str] = {}
    for name, module in modules.items():
        found = located.modules[name]
        where = located.tree_path(found.origin)
        if found.kind in (installed.MISSING, installed.UNREACHABLE):
            continue  # nothing to import (or a parent that already differs): the files' comparison says what is missing
        if found.kind == installed.PRELOADED:
            differ(module.path, UNVERIFIABLE, f"{name} is already imported when the interpreter starts (a .pth file or sitecustomize "
                                              f"imported it{', from ' + found.origin if found.origin else ''}): `import` returns that module")
        elif found.kind == installed.ERROR:
            differ(module.path, UNVERIFIABLE, f"looking {name} up fails: {found.detail}")
        elif found.kind == installed.OTHER:
            differ(where or module.path, UNVERIFIABLE, f"{name} is loaded by {found.loader} ({found.origin or 'no file'}), not by Python's own "
                                                       "file loader: a meta-path or path hook (a .pth file installs them), a zip archive")
        elif module.kind == "namespace" or found.kind == installed.NAMESPACE:
            if found.kind != installed.NAMESPACE:
                differ(where or module.path, SHADOWING, f"{name} imports {found.origin} ({_what(found)}), where the tree has a directory without __init__.py")
            # a tree package that imports as a namespace lacks its __init__.py: the files' comparison names it
        elif found.kind == installed.SOURCE and found.is_init == (module.kind == "package"):
            if _same_bytes(located, module.path, found.origin, listing[module.path]):
                accepted[name] = found.origin
            else:
                differ(where or module.path, SHADOWING, f"{name} imports {found.origin}, whose bytes are not the tree's {module.path}")
        else:
            differ(where or module.path, SHADOWING, f"{name} imports {found.origin} ({_what(found)}) instead of the tree's {module.path}")
    return accepted


def _what(found: installed.Resolution) -> str:
    if found.kind == installed.EXTENSION:
        return "a compiled extension module" + (", a native package" if found.is_init else "")
    if found.kind == installed.SOURCELESS:
        return "bytecode without its source"
    if found.kind == installed.SOURCE:
        return "a package" if found.is_init else "a module"
    return found.kind


def _same_bytes(located: installed.Located, path: str, origin: str, want: Entry) -> bool:
    """The file `import` loads for the tree's `path` has the tree's bytes: the very file the walk of
    its part compares (judged there), or another one, read and hashed here."""
    for part in located.parts:
        if path.startswith(part.prefix + "/") and os.path.normpath(part.path / path[len(part.prefix) + 1:]) == os.path.normpath(origin):
            return True
    return snapshot.file_blob_id(origin) == want.sha


def _compare_part(report: InstalledReport, part: installed.Part, located: installed.Located, listing: dict[str, Entry],
                  touched: dict[str, list[str]], differ) -> None:
    prefix = part.prefix + "/"
    want = {path[len(prefix):]: entry for path, entry in listing.items() if path.startswith(prefix)}
    if not want:
        report.others.append(str(part.path))  # megatron.X that the tree does not have
        return
    left_out: list[str] = []
    now = snapshot.take(part.path, want, _left_out(located.extension_suffixes, left_out))
    report.parts.append(PartReport(part.prefix, str(part.path), part.checkout, len(now.entries)))
    packages, before = _packages(want), len(report.differences)
    unreadable = set(now.unreadable)
    for path in left_out:
        if os.path.basename(path) == PYCACHE:
            report.pycache += 1
        else:
            report.compiled.append(prefix + path)  # unless the resolution named it: it replaces a module of the tree
    for path in sorted(want.keys() | now.entries.keys()):
        if path in unreadable:
            continue
        kind = _kind(part, path, now.entries.get(path), want.get(path), packages)
        if kind == NOT_INSTALLED:
            report.not_installed.append(prefix + path)
        elif kind is not None:
            differ(prefix + path, kind)
    for path in sorted(unreadable):
        differ(prefix + path, UNREADABLE)
    if part.checkout and len(report.differences) == before and now.tree != snapshot.tree_id(want):
        # Every path compared equal, yet the tree ids differ: never a yes (as verify --target).
        report.lock_problems.append(f"{part.path}: its tree id is {now.tree}, not the tree's {snapshot.tree_id(want)}")


def _require_parts(located: installed.Located, listing: dict[str, Entry], differ) -> None:
    """A part of the tree the interpreter does not find, where one must be, is deleted."""
    if not located.found or any(part.prefix == installed.PACKAGE for part in located.parts):
        return  # nothing found at all (said as such), or a regular package compared whole
    names = set(_part_names(listing))
    required = names if located.checkout else names & ({installed.CORE} | located.installed_parts)
    found = {part.prefix.split("/")[1] for part in located.parts}
    for name in sorted(required - found):
        resolution = located.modules.get(f"{installed.PACKAGE}.{name}")
        if resolution is None or resolution.kind in (installed.MISSING, installed.UNREACHABLE):
            why = "a checkout holds the whole tree" if located.checkout else (
                "every Megatron-LM build installs it" if name == installed.CORE else "the installed distribution's RECORD lists it")
            differ(f"{installed.PACKAGE}/{name}/", DELETED, f"import {installed.PACKAGE}.{name} finds nothing ({why})")


def _check_bytecode(located: installed.Located, accepted: dict[str, str], differ) -> None:
    """With strict: bytecode Python would load instead of compiling an accepted module's source."""
    by_source = {origin: name for name, origin in accepted.items()}
    for source, verdicts in installed.bytecode(located.python, sorted(by_source)).items():
        for pyc, verdict in verdicts:
            if verdict != "same":
                differ(located.tree_path(pyc) or pyc, BYTECODE, f"{by_source[source]}: {pyc}: {verdict}")


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


def _left_out(extension_suffixes: tuple[str, ...], found: list[str]) -> snapshot.Ignored:
    """What is not compared: __pycache__ directories and compiled extension modules (the suffixes
    the interpreter imports them by). Collects them into `found`."""
    def ignored(paths: list[str]) -> set[str]:
        left = {path for path in paths if os.path.basename(path) == PYCACHE or path.endswith(extension_suffixes)}
        found.extend(sorted(left))
        return left

    return ignored
