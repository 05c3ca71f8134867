"""Hostile or broken input files: a clear InvalidInput (exit 3) naming file and line, never a
hang, a crash or gigabytes of memory."""

from __future__ import annotations

import os
import time

import pytest

from rocmpatch import series
from rocmpatch.errors import ExitCode, InvalidInput
from rocmpatch.schema import load_lock_file, load_series


def test_duplicate_key_in_lock_is_an_error(project):
    project.lock_path.write_text(project.lock_path.read_text() + f"    patched_tree: {'0' * 40}\n")  # last would win
    with pytest.raises(InvalidInput, match=r"upstream.lock:\d+: duplicate key 'patched_tree' \(first on line \d+\)"):
        load_lock_file(project.lock_path)


@pytest.mark.parametrize("text", [
    "a: &a [*a]\n",  # self-referencing alias
    "version: 1\nx: &x [1, 2]\ny: *x\n",
    "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9 if i else ["lol"] * 9) + "]\n" for i in range(10)),  # alias bomb
])
def test_anchors_and_aliases_are_refused(project, text):
    project.lock_path.write_text(text)
    start = time.monotonic()
    with pytest.raises(InvalidInput, match=r"upstream.lock:\d+: YAML anchors and aliases"):
        load_lock_file(project.lock_path)
    assert time.monotonic() - start < 2


def test_deep_nesting_is_refused(project):
    project.lock_path.write_text("a: " + "[" * 20 + "]" * 20 + "\n")
    with pytest.raises(InvalidInput, match=r"upstream.lock:1: nested more than \d+ levels deep"):
        load_lock_file(project.lock_path)


def test_pathological_nesting_is_refused_with_the_file_and_line(project):
    # PyYAML may stop such a document itself before our depth check sees it (6.0.4 does, in its
    # own words): either way it is InvalidInput naming the file and line, never a crash.
    project.lock_path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InvalidInput, match=r"upstream.lock:1: "):
        load_lock_file(project.lock_path)


def test_lock_that_is_a_directory(project):
    project.lock_path.unlink()
    project.lock_path.mkdir()
    with pytest.raises(InvalidInput, match="is a directory"):
        series.load(project)


def test_lock_that_is_dev_zero(project):
    project.lock_path.unlink()
    project.lock_path.symlink_to("/dev/zero")
    with pytest.raises(InvalidInput, match="is not a regular file"):
        load_lock_file(project.lock_path)


def test_huge_lock_is_refused(project):
    project.lock_path.write_bytes(b"#" * (5 * 1024 * 1024))
    with pytest.raises(InvalidInput, match="more than the"):
        load_lock_file(project.lock_path)


def test_series_that_is_a_directory(project):
    path = project.series_dir / "series.yaml"
    path.unlink()
    path.mkdir()
    with pytest.raises(InvalidInput, match="series.yaml: is a directory"):
        load_series(project.series_dir)


def test_patch_that_is_a_fifo_is_refused_without_hanging(cli, project):
    patch = project.series_dir / "0001-first-fix.patch"
    patch.unlink()
    os.mkfifo(patch)
    result = cli("check")  # would block forever reading the FIFO
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "0001-first-fix.patch: is not a regular file" in result.output


def test_patch_that_is_a_directory(cli, project):
    patch = project.series_dir / "0001-first-fix.patch"
    patch.unlink()
    patch.mkdir()
    result = cli("verify", "--target", str(project.series_dir))
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "0001-first-fix.patch: is a directory" in result.output
