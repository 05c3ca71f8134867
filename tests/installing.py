"""A real `pip install` of a source tree into a throwaway virtual environment, fast and offline.

The venv is made without pip (`python -m venv --without-pip`, a fraction of a second); the tree's
wheel (or editable wheel) is built by its own build backend (setuptools' PEP 517 / PEP 660 hooks)
in the test's environment, as `pip install --no-build-isolation` would build it, and installed by
the test environment's pip into the venv (`pip --python VENV/bin/python install --no-deps`).
A wheel is built once per tree content in a test session (building is the slow part).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

_BUILT: dict[str, Path] = {}  # tree content digest -> its wheel
_LEFT_OUT = {".git", "build"}

_BUILD = """
import sys
from setuptools import build_meta
hook = build_meta.build_editable if sys.argv[1] == "editable" else build_meta.build_wheel
print(hook(sys.argv[2]))
"""


def make_venv(path: Path) -> Path:
    """A new virtual environment without pip; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    return path / "bin" / "python"


def build_wheel(tree: Path, out: Path, *, editable: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", _BUILD, "editable" if editable else "wheel", str(out)], cwd=tree,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def pip_install(python: Path, wheel: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                           "--no-index", "--disable-pip-version-check", str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def install(tree: Path, venv_dir: Path, *, editable: bool = False) -> Path:
    """`pip install [-e] TREE` into a new venv at venv_dir; returns the venv's python."""
    python = make_venv(venv_dir)
    if editable:  # an editable wheel names the tree's path: built each time
        wheel = build_wheel(tree, venv_dir.parent / f"{venv_dir.name}-wheel", editable=True)
    else:
        key = _digest(tree)
        if key not in _BUILT:
            keep = Path(tempfile.mkdtemp(prefix="rocmpatch-test-wheels-"))
            atexit.register(shutil.rmtree, keep, True)
            _BUILT[key] = build_wheel(tree, keep)
        wheel = _BUILT[key]
    pip_install(python, wheel)
    return python


def _digest(tree: Path) -> str:
    """The tree's files (paths, modes, bytes), build leftovers aside."""
    digest = hashlib.sha256()
    for directory, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in _LEFT_OUT and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(directory, name)
            digest.update(f"{path.relative_to(tree)}\0{path.stat().st_mode:o}\0".encode() + path.read_bytes())
    return digest.hexdigest()
