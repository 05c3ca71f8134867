"""The Megatron trees the series tests run on, built with rocmpatch's own series loader and patching.

- core: megatron/core of the pin, the megatron-core 0.5.0 wheel's bytes (fixture wheel_core_files),
  with the series' megatron/core hunks applied (files_under), or pristine;
- full: the whole pinned tree read from a Megatron-LM mirror (fixture upstream_mirror: skips without
  ROCMPATCH_TEST_UPSTREAM) with the whole series applied as `rocmpatch apply` applies it
  (trees.SeriesApplier, which writes nothing into the mirror), or pristine.

The series and the pin come from patchsets/ and upstream.lock (rocmpatch.series). The fixtures build
each tree once per session; checks that may run tree code import it only in a child (child.py).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Mapping

import pytest

from rocmpatch import gitcmd
from tests.series.trees import apply_series, files_under, read_from_mapping
from rocmpatch.series import LoadedSeries, find_patchsets, load
from rocmpatch.trees import SeriesApplier
from tests.series.trees import write_files

ROOT = Path(__file__).resolve().parents[3]
RELEASE = "core_v0.5.0"
PATCHSETS = ROOT / "patchsets" / RELEASE  # this release's folder
CORE = ("megatron/core/",)


@functools.cache
def loaded_series() -> LoadedSeries:
    """patchsets/series.yaml with every patch parsed, and upstream.lock."""
    patchsets, release = find_patchsets(PATCHSETS)
    return load(patchsets.location(release))


def pin_commit() -> str:
    # Whether the lock's sha256s are up to date is `rocmpatch check`'s test (test_full_tree.py).
    return loaded_series().lock.upstream.commit


def patched_core_tree(wheel_core_files: Mapping[str, bytes], dest: Path) -> Path:
    """megatron/core of the pin with the series' megatron/core hunks applied, written to dest."""
    patches = [files_under(loaded.patch, CORE) for loaded in loaded_series().patches]
    changes = apply_series(patches, read_from_mapping(wheel_core_files))
    return write_files(dest, {**wheel_core_files, **changes})


def full_series_applier(mirror: Path, *, patched: bool = True) -> SeriesApplier:
    """The pinned tree of the mirror, in memory, with the whole series applied (or not)."""
    repo = gitcmd.open_repo(mirror)
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, pin_commit()))
    if patched:
        for loaded in loaded_series().patches:
            applier.apply(loaded)
    return applier


def patched_upstream_tree(mirror: Path, dest: Path, *, patched: bool = True) -> Path:
    """The whole pinned tree from a Megatron-LM mirror, with the whole series applied, written to dest.
    Regular files only: the pin has no symlink or submodule."""
    applier = full_series_applier(mirror, patched=patched)
    entries = applier.reader.entries
    files = {path: applier.read(path) for path in {**entries, **applier.changes}}
    modes = {path: entry.mode for path, entry in entries.items()} | applier.modes
    return write_files(dest, files, frozenset(path for path, mode in modes.items() if mode == 0o100755))


@pytest.fixture(scope="session")
def patched_core(wheel_core_files, tmp_path_factory) -> Path:
    return patched_core_tree(wheel_core_files, tmp_path_factory.mktemp("core-patched"))


@pytest.fixture(scope="session")
def pristine_core(wheel_core_files, tmp_path_factory) -> Path:
    return write_files(tmp_path_factory.mktemp("core-pristine"), wheel_core_files)


@pytest.fixture(scope="session")
def patched_full(upstream_mirror, tmp_path_factory) -> Path:
    return patched_upstream_tree(upstream_mirror, tmp_path_factory.mktemp("full-patched"))


@pytest.fixture(scope="session")
def pristine_full(upstream_mirror, tmp_path_factory) -> Path:
    return patched_upstream_tree(upstream_mirror, tmp_path_factory.mktemp("full-pristine"), patched=False)
