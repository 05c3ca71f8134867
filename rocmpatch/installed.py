"""The `megatron` package a Python interpreter imports: where it lives, asked of that interpreter,
and its files read and hashed here (rocmpatch.snapshot), for `rocmpatch verify --installed`.

The interpreter is run once, as a subprocess, with a few lines that call importlib.util.find_spec;
no code of Megatron's runs, there or in rocmpatch's own process:
- find_spec("megatron") finds a package without executing it (a regular package's __init__.py is
  never run: its parts are looked up beside it, on disk);
- only a namespace `megatron` (no __init__.py, as core_v0.19.0 and any `pip install` lay it out)
  is imported to ask for its parts (`megatron.core`, `megatron.training`, ...), which runs no code.
It is started as a training job would start it, so that it finds what a job imports: PYTHONPATH
and the user's site-packages count (-I would ignore them, and -S would ignore site-packages and the
.pth files that editable installs use), but it runs in an empty directory (the current directory
cannot shadow the package), writes no bytecode, and PYTHONSTARTUP / PYTHONINSPECT are dropped.
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

from rocmpatch.errors import EnvironmentProblem, UsageError

PACKAGE = "megatron"
LOOKUP_TIMEOUT = 120.0  # seconds; a site-packages with many .pth hooks on a busy machine

# Runs inside the interpreter asked about (any Python >= 3.7); argv: the part names to look up.
_LOOKUP = r"""
import importlib.machinery, importlib.util, json, os, sys
found = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
         "extension_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES), "kind": None, "root": None, "parts": {},
         "locations": []}
spec = importlib.util.find_spec("megatron")
if spec is not None:
    found["locations"] = [p for p in (spec.submodule_search_locations or []) if os.path.isdir(p)]
    if spec.has_location and spec.origin and os.path.basename(spec.origin).startswith("__init__."):
        found["kind"], found["root"] = "package", os.path.dirname(spec.origin)
    elif spec.submodule_search_locations is not None:
        found["kind"] = "namespace"
        for name in sys.argv[1:]:
            part = importlib.util.find_spec("megatron." + name)
            dirs = [p for p in (part.submodule_search_locations or []) if os.path.isdir(p)] if part else []
            if dirs:
                found["parts"][name] = dirs[0]
    else:
        found["kind"], found["root"] = "module", spec.origin
print("\n" + json.dumps(found))
"""

_DROPPED_VARIABLES = ("PYTHONSTARTUP", "PYTHONINSPECT")


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
    kind: str | None  # package | namespace | module | None (not found)
    parts: list[Part] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # directories of the megatron namespace that are no part of the tree

    @property
    def found(self) -> bool:
        return bool(self.parts)


def locate(python: str, part_names: list[str]) -> Located:
    """Ask `python` where it imports megatron from (see the module docstring); `part_names` are the
    tree's directories under megatron/ (core, training, ...)."""
    executable = _interpreter(python)
    environment = {k: v for k, v in os.environ.items() if k not in _DROPPED_VARIABLES}
    environment.update(PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1")
    with tempfile.TemporaryDirectory(prefix="rocmpatch-lookup-") as empty:
        try:
            done = subprocess.run([executable, "-c", _LOOKUP, *part_names], cwd=empty, env=environment, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=LOOKUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"--python {python}: did not answer where it imports {PACKAGE} from within {LOOKUP_TIMEOUT:.0f} s",
                                     hint="is that interpreter's start-up (a .pth file of its site-packages) hanging?") from None
        except OSError as exc:
            raise UsageError(f"--python {python}: cannot run it ({exc.strerror})", hint="give a Python interpreter, e.g. /opt/venv/bin/python") from None
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        if done.returncode != 0:
            raise ValueError
        found = json.loads(lines[-1])
    except (ValueError, IndexError):
        last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"--python {python}: could not say where it imports {PACKAGE} from (exit {done.returncode}: {last})",
                                 hint="is it a Python interpreter (3.7 or newer)? run it by hand with -c 'import importlib.util; print(importlib.util.find_spec(\"megatron\"))'") from None
    located = Located(python, found["executable"], found["version"], tuple(found["extension_suffixes"]), found["kind"])
    if found["kind"] == "package":
        root = Path(found["root"])
        located.parts.append(Part(PACKAGE, root, _is_checkout(root.parent)))
    elif found["kind"] == "namespace":
        for name, path in found["parts"].items():
            located.parts.append(Part(f"{PACKAGE}/{name}", Path(path), _is_checkout(Path(path).parent.parent)))
        taken = {part.path for part in located.parts}
        for location in found["locations"]:
            for entry in sorted(Path(location).iterdir()) if Path(location).is_dir() else ():
                if entry.is_dir() and entry.name != "__pycache__" and entry not in taken and entry.name not in found["parts"]:
                    located.others.append(str(entry))
    return located


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
