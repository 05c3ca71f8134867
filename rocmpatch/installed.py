"""What a Python interpreter imports for each module of the tree, asked of that interpreter, for
`rocmpatch verify --installed`; its files are read and hashed by rocmpatch (operations/verifying_installed).

The interpreter runs rocmpatch/import_lookup.py (as `-c` text) in a subprocess: for every module
name the tree has (`megatron`, `megatron.core`, `megatron.core.models`, ...) it answers what
`import` would load, found the way the import system finds it: sys.modules, then each finder on
sys.meta_path in order (the path finder with the site's path hooks and path order, any meta-path
hook a .pth file installed), each name looked up in its parent's search locations. Nothing is
imported there, and nothing in rocmpatch's own process: no code of Megatron's runs.
It is started as a training job would start it, so that it finds what a job imports: PYTHONPATH
and the user's site-packages count (-I would ignore them, and -S would ignore site-packages and the
.pth files that editable installs use), but it runs in an empty directory (the current directory
cannot shadow the package), writes no bytecode, and PYTHONSTARTUP / PYTHONINSPECT are dropped.
Its answer is written to a file rocmpatch names, never read from stdout (a site may print there),
and is refused (exit 8) unless it has exactly the expected form.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rocmpatch.errors import EnvironmentProblem, InvalidInput, UsageError

PACKAGE = "megatron"
CORE = "core"  # megatron/core: what every Megatron-LM build installs (the megatron-core distribution)
LOOKUP_TIMEOUT = 120.0  # seconds; a site-packages with many .pth hooks on a busy machine
RECORD_LIMIT = 16 << 20  # bytes of a *.dist-info/RECORD read

# What `import NAME` would load (import_lookup.py's kinds):
SOURCE, NAMESPACE, EXTENSION, SOURCELESS = "source", "namespace", "extension", "sourceless"
OTHER = "other"  # a loader that is not Python's own file loader (a hook's, zipimport's)
PRELOADED = "preloaded"  # already in sys.modules when the interpreter has started
ERROR = "error"  # a finder raised: `import` fails there too
MISSING, UNREACHABLE = "missing", "unreachable"  # found by no finder; below a parent that is no package
_KINDS = {SOURCE, NAMESPACE, EXTENSION, SOURCELESS, OTHER, PRELOADED, ERROR, MISSING, UNREACHABLE}

_DROPPED_VARIABLES = ("PYTHONSTARTUP", "PYTHONINSPECT")
_SCRIPT = Path(__file__).with_name("import_lookup.py")


@dataclass(frozen=True)
class Resolution:
    """What the interpreter's import system answers for one module name."""

    kind: str
    origin: str | None = None  # the file it loads (None for a namespace package)
    locations: tuple[str, ...] | None = None  # where its submodules are looked up (a package)
    loader: str | None = None  # the loader's class, module.qualname
    detail: str | None = None  # a finder's error

    @property
    def is_init(self) -> bool:
        return self.origin is not None and os.path.basename(self.origin).startswith("__init__.")


@dataclass(frozen=True)
class TreeModule:
    """A module of the tree: its dotted name's file (x.py, x/__init__.py), or, for a directory
    without __init__.py (a namespace package), the directory."""

    path: str
    kind: str  # module | package | namespace


@dataclass(frozen=True)
class Part:
    """One directory of the package as the interpreter imports it, and its place in the tree."""

    prefix: str  # in the tree: "megatron" (a regular package, whole) or "megatron/core"
    path: Path
    checkout: bool  # a git checkout's own directory (editable install, PYTHONPATH): nothing may be left out


@dataclass
class Located:
    python: str  # as given
    executable: str  # sys.executable of that interpreter
    version: str
    extension_suffixes: tuple[str, ...]
    modules: dict[str, Resolution]  # every module name of the tree -> what `import` loads for it
    roots: list[Path] = field(default_factory=list)  # the megatron directories: a namespace's portions, or the package's
    parts: list[Part] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # entries of the megatron directories that are no part of the tree
    installed_parts: set[str] = field(default_factory=set)  # parts a *.dist-info/RECORD beside a megatron directory lists

    @property
    def found(self) -> bool:
        return bool(self.parts)

    @property
    def checkout(self) -> bool:
        """A megatron directory is a git checkout's own: it must hold the whole tree."""
        return any(_is_checkout(root.parent) for root in self.roots)

    def tree_path(self, path: str | None) -> str | None:
        """`path` (a file the interpreter loads) as a path of the tree when it lies in one of the
        megatron directories (megatron/core/x.py), else None."""
        if path is None:
            return None
        normal = os.path.normpath(path)
        for root in self.roots:
            top = os.path.normpath(root)
            if normal.startswith(top + os.sep):
                return PACKAGE + "/" + normal[len(top) + 1:].replace(os.sep, "/")
        return None


def tree_modules(listing: Mapping[str, Any]) -> dict[str, TreeModule]:
    """Every module name the tree's megatron/ has: its directories (packages, or namespace
    packages without __init__.py) and its .py files; names Python cannot import (not
    identifiers) are left out, with what is below them. Of one name, what Python's file finder
    takes: a package (x/__init__.py) before a module (x.py) before a namespace directory (x/)."""
    prefix = PACKAGE + "/"
    paths = [path for path in listing if path.startswith(prefix)]
    directories = {PACKAGE}
    for path in paths:
        parts = path.split("/")
        directories.update("/".join(parts[:n]) for n in range(2, len(parts)))
    modules: dict[str, TreeModule] = {}
    for directory in directories:
        if all(part.isidentifier() for part in directory.split("/")):
            init = f"{directory}/__init__.py"
            modules[directory.replace("/", ".")] = TreeModule(init, "package") if init in listing else TreeModule(directory, "namespace")
    for path in paths:
        directory, _, name = path.rpartition("/")
        stem = name[:-3] if name.endswith(".py") else None
        name = f"{directory}.{stem}".replace("/", ".") if stem else None
        if stem and stem != "__init__" and stem.isidentifier() and directory.replace("/", ".") in modules:
            if name not in modules or modules[name].kind == "namespace":
                modules[name] = TreeModule(path, "module")
    return dict(sorted(modules.items(), key=lambda item: (item[0].count("."), item[0])))  # parents first


def locate(python: str, module_names: list[str], part_names: list[str]) -> Located:
    """Ask `python` what it imports for each of `module_names` (see the module docstring);
    `part_names` are the tree's directories under megatron/ (core, training, ...)."""
    executable = _interpreter(python)
    answer = _ask(python, executable, "resolve", module_names)
    located = Located(python, answer["executable"], answer["version"], tuple(answer["extension_suffixes"]), answer["modules"])
    top = located.modules.get(PACKAGE, Resolution(MISSING))
    if top.kind == SOURCE and top.is_init:  # a regular package: the whole megatron/ is one part
        root = Path(os.path.dirname(top.origin))
        located.roots = [root]
        located.parts.append(Part(PACKAGE, root, _is_checkout(root.parent)))
    elif top.locations is not None:
        located.roots = [Path(p) for p in top.locations if os.path.isdir(p)]
        for name in part_names:
            found = located.modules.get(f"{PACKAGE}.{name}", Resolution(MISSING))
            directory = None
            if found.kind == SOURCE and found.is_init:
                directory = os.path.dirname(found.origin)
            elif found.kind == NAMESPACE:
                directory = next((p for p in found.locations if os.path.isdir(p)), None)
            if directory is not None:
                located.parts.append(Part(f"{PACKAGE}/{name}", Path(directory), _is_checkout(Path(directory).parent.parent)))
        taken = {os.path.normpath(part.path) for part in located.parts}
        for root in located.roots:
            for entry in sorted(root.iterdir()):
                stem = entry.name.split(".", 1)[0]  # training.py, training.cpython-311-*.so: judged as megatron.training
                if entry.name != "__pycache__" and stem not in part_names and stem != "__init__" and os.path.normpath(entry) not in taken:
                    located.others.append(str(entry))
    located.installed_parts = _recorded_parts(located.roots)
    return located


def bytecode(python: str, sources: list[str]) -> dict[str, list[tuple[str, str]]]:
    """For each source file: (bytecode file, verdict) for every bytecode file the interpreter
    could load instead of compiling it; the verdict is "same" (the source's own code) or why not.
    An interpreter that dies on one (its unmarshaller crashed) gets that one reported as not
    proven, and is started again for the rest."""
    executable = _interpreter(python)
    verdicts: dict[str, list[tuple[str, str]]] = {}
    remaining = list(sources)
    while remaining:
        answered, status = _ask_lines(python, executable, remaining)
        for line in answered:
            verdicts[line["source"]] = [(item["pyc"], item["verdict"]) for item in line["bytecode"]]
        remaining = [source for source in remaining if source not in verdicts]
        if remaining:
            stuck = remaining.pop(0)
            verdicts[stuck] = [(stuck, f"differs: the interpreter could not check its bytecode ({status})")]
            if status.startswith("no answer within"):
                verdicts.update((source, [(source, f"differs: not checked ({status})")]) for source in remaining)
                remaining = []
    return verdicts


def _environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in _DROPPED_VARIABLES}
    environment.update(PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1")
    return environment


def _run_lookup(python: str, executable: str, mode: str, request: list[str], out: Path, empty: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([executable, "-c", _SCRIPT.read_text(encoding="utf-8"), mode, str(out)], cwd=empty, env=_environment(),
                              input=json.dumps(request).encode(), capture_output=True, timeout=LOOKUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"--python {python}: did not answer what it imports for {PACKAGE} within {LOOKUP_TIMEOUT:.0f} s",
                                 hint="is that interpreter's start-up (a .pth file of its site-packages) hanging?") from None
    except OSError as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc.strerror})", hint="give a Python interpreter, e.g. /opt/venv/bin/python") from None


def _ask(python: str, executable: str, mode: str, request: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="rocmpatch-lookup-", ignore_cleanup_errors=True) as empty:
        out = Path(empty) / "answer.json"
        done = _run_lookup(python, executable, mode, request, out, empty)
        try:
            text = out.read_text(encoding="utf-8") if done.returncode == 0 else None
        except (OSError, UnicodeDecodeError):
            text = None
    if text is None:
        last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"--python {python}: could not say what it imports for {PACKAGE} (exit {done.returncode}: {last})",
                                 hint="is it a Python interpreter (3.7 or newer)? run it by hand with -c 'import importlib.util; print(importlib.util.find_spec(\"megatron\"))'")
    try:
        return _checked_answer(json.loads(text), request)
    except ValueError as exc:
        raise EnvironmentProblem(f"--python {python}: answered in a form rocmpatch does not read ({exc}); nothing was compared",
                                 hint="is it a CPython interpreter? a sitecustomize or .pth file that rewrites the import system cannot be checked") from None


def _checked_answer(answer: Any, names: list[str]) -> dict:
    """The resolve answer, each field of the expected type, every name answered; ValueError else."""
    if not isinstance(answer, dict):
        raise ValueError(f"a JSON {type(answer).__name__}, not an object")
    for key in ("executable", "version"):
        if not isinstance(answer.get(key), str):
            raise ValueError(f"no {key}")
    suffixes = answer.get("extension_suffixes")
    if not isinstance(suffixes, list) or not all(isinstance(s, str) and s for s in suffixes):
        raise ValueError("no extension_suffixes")
    modules = answer.get("modules")
    if not isinstance(modules, dict) or set(modules) != set(names):
        raise ValueError("not every module answered")
    resolved = {}
    for name, item in modules.items():
        if not isinstance(item, dict) or item.get("kind") not in _KINDS:
            raise ValueError(f"{name}: no kind")
        locations = item.get("locations")
        if locations is not None and not (isinstance(locations, list) and all(isinstance(p, str) for p in locations)):
            raise ValueError(f"{name}: locations")
        strings = {key: item.get(key) for key in ("origin", "loader", "detail")}
        if not all(value is None or isinstance(value, str) for value in strings.values()):
            raise ValueError(f"{name}: origin, loader or detail")
        resolved[name] = Resolution(item["kind"], locations=tuple(locations) if locations is not None else None, **strings)
    return {**answer, "modules": resolved}


def _ask_lines(python: str, executable: str, sources: list[str]) -> tuple[list[dict], str]:
    """The bytecode answers the interpreter wrote (one line per source, as each was done), and how it ended."""
    with tempfile.TemporaryDirectory(prefix="rocmpatch-lookup-", ignore_cleanup_errors=True) as empty:
        out = Path(empty) / "answer.jsonl"
        try:
            done = _run_lookup(python, executable, "bytecode", sources, out, empty)
            status = f"exit {done.returncode}"
        except EnvironmentProblem:
            status = f"no answer within {LOOKUP_TIMEOUT:.0f} s"
        try:
            lines = out.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
    answered = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            break  # the line being written when it died
        if not (isinstance(item, dict) and item.get("source") in sources and isinstance(item.get("bytecode"), list)
                and all(isinstance(b, dict) and isinstance(b.get("pyc"), str) and isinstance(b.get("verdict"), str) for b in item["bytecode"])):
            raise EnvironmentProblem(f"--python {python}: answered in a form rocmpatch does not read (a bytecode line); nothing was compared",
                                     hint="is it a CPython interpreter?")
        answered.append(item)
    return answered, status


def _recorded_parts(roots: list[Path]) -> set[str]:
    """The parts (core, training, ...) that a *.dist-info/RECORD beside a megatron directory lists
    files of: what an installed distribution put there, so what must be there."""
    parts: set[str] = set()
    for root in roots:
        for record in sorted(root.parent.glob("*.dist-info/RECORD")):
            try:
                text = read_record(record)
            except InvalidInput:
                continue
            for line in text.splitlines():
                path = line.split(",", 1)[0].strip('"')
                pieces = path.split("/")
                if len(pieces) >= 3 and pieces[0] == PACKAGE and pieces[1] not in ("", "..", "__pycache__"):
                    parts.add(pieces[1])
    return parts


def read_record(path: Path) -> str:
    from rocmpatch.files import read_regular_file

    return read_regular_file(path, limit=RECORD_LIMIT, what="RECORD").decode("utf-8", "replace")


def _interpreter(python: str) -> str:
    """An executable path for --python (a name is looked up on PATH)."""
    path = python if os.sep in python else shutil.which(python)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise UsageError(f"--python {python}: no such interpreter" + ("" if os.sep in python else " on PATH"),
                         hint="give the path of the Python whose megatron to check, e.g. /opt/venv/bin/python")
    return os.path.abspath(path)  # it runs in an empty directory; a venv's symlink is kept (not resolved)


def _is_checkout(directory: Path) -> bool:
    """A git checkout's top (a .git directory or file there): an editable install or PYTHONPATH."""
    return (directory / ".git").exists()


def default_python() -> str:
    return sys.executable
