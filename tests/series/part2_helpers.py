"""Shared helpers of the part-2 series tests (training, checkpoints, resume).

The series is patchsets/series.yaml. Trees are built once per session; the checks themselves run in
one child process per group (tests/series/part2_checks.py), on the patched tree's sources, so
that a hard crash or a process group cannot leak into pytest.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from rocmpatch.patching import Patch, apply_series, files_under, parse_patch, read_from_mapping
from rocmpatch.schema import Series, load_series

ROOT = Path(__file__).resolve().parents[2]
PATCHSETS = ROOT / "patchsets"
CHECKS = Path(__file__).with_name("part2_checks.py")
CORE = ("megatron/core/",)
PIN = "0acc240ebd2877b4ca5f5b471ea7554bbc62c1b9"  # upstream.lock's commit (core_v0.5.0)


def load_full_series(patchsets: Path = PATCHSETS) -> list[tuple[Series, object]]:
    """(series, entry) pairs of patchsets/series.yaml, in order."""
    series = load_series(patchsets)
    return [(series, entry) for entry in series.entries]


def series_patches(prefixes: tuple[str, ...] | None = None) -> list[Patch]:
    patches = []
    for series, entry in load_full_series():
        path = series.patch_path(entry)
        text = path.read_bytes().decode("utf-8", "surrogateescape")
        patch = parse_patch(text, name=entry.name, source=str(path.relative_to(ROOT)))
        patches.append(files_under(patch, prefixes) if prefixes else patch)
    return patches


def write_tree(files: dict[str, bytes], changes: dict[str, bytes | None], dest: Path) -> Path:
    for path, data in {**files, **changes}.items():
        if data is None:
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


def patched_core_tree(wheel_core_files: dict[str, bytes], dest: Path) -> Path:
    """megatron/core of the pin (the wheel's bytes) with the series' megatron/core hunks applied."""
    changes = apply_series(series_patches(CORE), read_from_mapping(wheel_core_files))
    return write_tree(wheel_core_files, changes, dest)


def patched_upstream_tree(mirror: Path, dest: Path) -> Path:
    """The whole pinned tree from a Megatron-LM mirror, with the whole series applied."""
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir(mirror)}", "archive", "--format=tar", PIN],
        check=True, capture_output=True,
    ).stdout
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read()
    changes = apply_series(series_patches(), read_from_mapping(files))
    return write_tree(files, changes, dest)


def git_dir(mirror: Path) -> Path:
    return mirror / ".git" if (mirror / ".git").exists() else mirror


def run_checks(tree: Path, group: str, tmp: Path, timeout: int = 600) -> dict[str, dict]:
    """Run one group of part2_checks.py against `tree` in a child process: {check: result}."""
    out = tmp / f"{group}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    env.update(PYTHONPATH=str(tree), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2", PYTHONWARNINGS="default")
    proc = subprocess.run(
        [sys.executable, str(CHECKS), group, str(out)],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
    )
    if not out.exists():
        raise AssertionError(f"check group {group} crashed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return json.loads(out.read_text())
