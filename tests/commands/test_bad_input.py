"""Bad input that used to crash (exit 70, a traceback, a hang) or run before failing: each is one line
with a hint and a documented exit code, before anything runs or is written (issue 32)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from tests.fixtures import make_overlay

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def one_line(result, *words):
    """The refusal is one error line (plus its hint), naming each of `words`; nothing on stdout."""
    lines = result.stderr.strip().splitlines()
    assert lines and lines[0].startswith("rocmpatch: error: "), result.output
    assert all(line.startswith("  hint: ") for line in lines[1:]), result.output
    assert all(word in lines[0] for word in words), lines[0]
    assert result.stdout == ""


# --- output paths are checked before the work ---------------------------------------------------

@pytest.mark.parametrize("where", ["dir", "missing-parent", "fifo"])
def test_drift_markdown_that_cannot_be_written_is_refused_before_the_walk(cli, tmp_path, where):
    path = {"dir": tmp_path, "missing-parent": tmp_path / "no" / "such" / "r.md", "fifo": tmp_path / "fifo"}[where]
    if where == "fifo":
        os.mkfifo(path)
    # --upstream-url names nothing: reaching the walk would exit 6; the output check comes first
    result = cli("drift", "--markdown", str(path), "--upstream-url", str(tmp_path / "nowhere"))
    assert result.exit_code == ExitCode.USAGE, result.output
    one_line(result, "--markdown", str(path))


def test_preflight_run_with_an_unwritable_json_is_refused_before_starting(tmp_path):
    result = invoke("preflight", "--run", "--device", "cpu", "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert result.exit_code == ExitCode.USAGE
    one_line(result, "--json", "does not exist")


def test_example_write_to_a_file_is_refused_and_the_file_kept(tmp_path):
    existing = tmp_path / "notes.txt"
    existing.write_text("mine\n")
    for path in (existing, existing / "sub"):
        result = invoke("example", "--write", str(path))
        assert result.exit_code == ExitCode.USAGE, result.output
        one_line(result, "--write", str(path))
    assert existing.read_text() == "mine\n" and sorted(os.listdir(tmp_path)) == ["notes.txt"]


# --- values that parse but mean nothing ------------------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--min-of-median", "nan"), ("--min-of-median", "-0.5"), ("--min-of-peak", "1.5"),
                                         ("--min-of-peak", "inf"), ("--min-busbw", "nan"), ("--min-busbw", "-1")])
@pytest.mark.parametrize("run", [False, True])
def test_preflight_thresholds_that_could_never_fail_are_refused(flag, value, run):
    result = invoke("preflight", *(["--run", "--device", "cpu"] if run else []), flag, value)
    assert result.exit_code == ExitCode.USAGE
    one_line(result, flag)


def test_the_preflight_worker_refuses_them_too():
    for args in (["--min-of-median", "nan"], ["--min-busbw", "-3"], ["--iters", "0"], ["--gemm-size", "-1"]):
        done = subprocess.run([sys.executable, "-m", "rocmpatch.preflight", *args], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "1"}, timeout=60)
        assert done.returncode == 2 and args[0] in done.stderr and "Traceback" not in done.stderr


def test_preflight_device_gpu_without_a_gpu_is_an_environment_problem():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = invoke("preflight", "--run", "--device", "gpu")
    assert result.exit_code == ExitCode.ENVIRONMENT
    one_line(result, "--device gpu", "no GPU")


def test_the_preflight_worker_says_so_in_one_line_too(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    done = subprocess.run([sys.executable, "-m", "rocmpatch.preflight", "--device", "gpu"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == ExitCode.ENVIRONMENT and "no GPU" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("gpus", [" ", "", " , "])
def test_smoke_gpus_naming_no_gpu_is_refused_before_anything_runs(tmp_path, gpus):
    result = invoke("smoke", "--target", str(tmp_path), "--gpus", gpus)
    assert result.exit_code == ExitCode.USAGE
    one_line(result, "--gpus")


def test_smoke_on_a_folder_that_is_no_megatron_tree_is_refused(tmp_path):
    result = invoke("smoke", "--target", str(tmp_path), "--device", "cpu")
    assert result.exit_code == 5 and "no megatron/core/__init__.py" in result.output


# --- locks naming a tree the series does not give --------------------------------------------------

def _bogus_patched_tree(lock: Path) -> None:
    text = lock.read_text()
    lock.write_text(re.sub(r"^(\s*)patched_tree: [0-9a-f]{40}$", r"\g<1>patched_tree: " + "1" * 40, text, flags=re.M))


@pytest.mark.parametrize("which", ["upstream.lock", "overlay.lock"])
def test_a_patched_tree_no_repository_has_is_invalid_input_on_an_existing_target(cli, project, upstream, tmp_path, which, monkeypatch):
    overlay = make_overlay(tmp_path / "overlay", upstream, project)
    stack = ["--overlay", str(overlay)] if which == "overlay.lock" else []
    target = tmp_path / "t"
    assert cli("apply", "-t", str(target), *stack).exit_code == 0
    head = (target / ".git" / "HEAD").read_text()
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "fresh-cache"))  # no stat cache: the tree is listed
    lock = project.lock_path if which == "upstream.lock" else overlay / "overlay.lock"
    _bogus_patched_tree(lock)
    result = cli("apply", "-t", str(target), *stack)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    one_line(result, str(lock), "patched_tree")
    assert (target / ".git" / "HEAD").read_text() == head


def test_unapply_refuses_a_stale_overlay_lock_as_apply_does(cli, project, upstream, tmp_path):
    overlay = make_overlay(tmp_path / "overlay", upstream, project)
    target = tmp_path / "t"
    assert cli("apply", "-t", str(target), "--overlay", str(overlay)).exit_code == 0
    lock = overlay / "overlay.lock"
    lock.write_text(re.sub(r"^release_tree: [0-9a-f]{40}$", "release_tree: " + "2" * 40, lock.read_text(), flags=re.M))
    head = (target / ".git" / "HEAD").read_text()
    for command in ("apply", "unapply"):
        result = cli(command, "-t", str(target), "--overlay", str(overlay))
        assert result.exit_code == ExitCode.INVALID_INPUT, (command, result.output)
        one_line(result, str(lock), "release_tree")
    assert (target / ".git" / "HEAD").read_text() == head and (target / "pkg" / "framework.py").exists()
