"""Shared helpers for the tests of the patch series itself (patchsets/).

Patched Megatron code runs in child processes (tests/series/child.py): each child imports a
fresh copy of the patched tree with NVIDIA-only packages blocked, so nothing leaks between
trees (pristine vs patched) through sys.modules, and the test process never imports Megatron.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import io
import tarfile
from pathlib import Path

import pytest

from rocmpatch.patching import Patch, apply_series, files_under, parse_patch
from rocmpatch.schema import load_series

REPO_ROOT = Path(__file__).resolve().parents[2]
PATCHSETS = REPO_ROOT / "patchsets"
CHILD = Path(__file__).with_name("child.py")
PIN_COMMIT = "0acc240ebd2877b4ca5f5b471ea7554bbc62c1b9"


def series_patches() -> list[Patch]:
    """Every patch of patchsets/series.yaml, in order, read as bytes (never text mode)."""
    series = load_series(PATCHSETS)
    return [
        parse_patch(
            series.patch_path(entry).read_bytes().decode("utf-8", "surrogateescape"),
            name=entry.name,
            source=str(series.patch_path(entry)),
        )
        for entry in series.entries
    ]


def write_tree(root: Path, files: dict[str, bytes | None]) -> None:
    for path, data in files.items():
        target = root / path
        if data is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def run_child(*args: str, timeout: int = 300) -> dict:
    """Run tests/series/child.py; it prints one JSON object on its last stdout line."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS")}
    env["PYTHONWARNINGS"] = "ignore"
    proc = subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=args[1] if len(args) > 1 else None,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"child {args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def git(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run git with no inherited GIT_* variables (tests may run inside a git hook or worktree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", HOME=str(cwd or Path.cwd()))
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, **kwargs)


@pytest.fixture(scope="session")
def patched_core_tree(wheel_core_files, tmp_path_factory) -> Path:
    """megatron/core/ from the wheel with the series' megatron/core/ hunks applied, on disk."""
    patches = [files_under(p, ("megatron/core/",)) for p in series_patches()]
    changes = apply_series(patches, wheel_core_files.get)
    root = tmp_path_factory.mktemp("patched-core")
    write_tree(root, {**wheel_core_files, **changes})
    return root


@pytest.fixture(scope="session")
def pin_archive(upstream_mirror) -> bytes:
    """The pinned Megatron-LM tree as a tar, read from the mirror with git archive."""
    return git("--git-dir", str(upstream_mirror), "archive", "--format=tar", PIN_COMMIT).stdout


def extract(archive: bytes, root: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def read_tree(root: Path):
    def read(path: str) -> bytes | None:
        target = root / path
        return target.read_bytes() if target.is_file() else None

    return read


@pytest.fixture(scope="session")
def pin_tree(pin_archive, tmp_path_factory) -> Path:
    """The pristine pinned tree, on disk."""
    return extract(pin_archive, tmp_path_factory.mktemp("pin"))


@pytest.fixture(scope="session")
def patched_tree(pin_archive, tmp_path_factory) -> Path:
    """The pinned tree with the whole series applied exactly, on disk."""
    root = extract(pin_archive, tmp_path_factory.mktemp("patched"))
    write_tree(root, apply_series(series_patches(), read_tree(root)))
    return root
