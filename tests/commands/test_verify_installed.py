"""verify --installed: the megatron package a real Python imports, installed by a real pip (a
wheel or an editable install of a patched checkout), against the locked patched tree."""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocmpatch import gitcmd
from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from rocmpatch import store
from rocmpatch.operations import locking
from tests.fixtures import (Upstream, commit_all, make_series, tagged_upstream, patch_texts, replace_line, write_files, write_lock, write_overlay_lock,
                            write_series, write_series_dir)
from tests.installing import install, make_venv

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "megatron-core"
version = "0.1.0"

[tool.setuptools]
include-package-data = true

[tool.setuptools.packages.find]
include = ["megatron.core", "megatron.core.*", "megatron.training", "megatron.training.*"]
"""
MODEL = "".join(f"def layer{i}():\n    return {i}\n\n" for i in range(12))
FILES = {
    "pyproject.toml": PYPROJECT,
    "MANIFEST.in": "include megatron/core/requirements.txt\n",
    "pretrain_gpt.py": "import megatron.training\n",
    "megatron/core/__init__.py": "",
    "megatron/core/model.py": MODEL,
    "megatron/core/requirements.txt": "torch\n",
    "megatron/core/README.md": "core\n",
    "megatron/core/datasets/__init__.py": "",
    "megatron/core/datasets/helpers.cpp": "// built into helpers_cpp\n",
    "megatron/core/datasets/blended.py": "BLENDED = 1\n",
    "megatron/core/notes/draft.py": "DRAFT = 1\n",  # no __init__.py: no package, yet data setuptools installs
    "megatron/training/__init__.py": "",
    "megatron/training/train.py": "TRAIN = 1\n",
}
PATCHES = [
    ("rocm-model", {"megatron/core/model.py": replace_line(MODEL, "return 3\n", "return 33  # rocm\n"),
                    "megatron/training/rocm.py": "ROCM = 1\n"}),
]
OVERLAY = [("framework-model", {"megatron/core/model.py": replace_line(replace_line(MODEL, "return 3\n", "return 33  # rocm\n"),
                                                                        "return 5\n", "return 55  # framework\n")})]
EXTENSION = sysconfig.get_config_var("EXT_SUFFIX")  # .cpython-311-x86_64-linux-gnu.so


@pytest.fixture
def upstream(tmp_path):
    return tagged_upstream(tmp_path, FILES)


@pytest.fixture
def project(tmp_path, upstream):
    return make_series(tmp_path / "proj", upstream, PATCHES)


def verify(cli, python, *extra):
    result = cli("verify", "--installed", "--python", str(python), "--json", *extra)
    return result.exit_code, json.loads(result.stdout)


def site_packages(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python*/site-packages"))


def test_an_installed_copy_of_the_patched_tree_is_verified(cli, checkout, tmp_path):
    python = install(checkout, tmp_path / "venv")
    code, report = verify(cli, python)
    assert code == 0, report
    assert report["release"] == "test_v1" and report["found"]
    installed = site_packages(python) / "megatron"
    assert [(p["prefix"], p["path"], p["checkout"]) for p in report["parts"]] == [
        ("megatron/core", str(installed / "core"), False), ("megatron/training", str(installed / "training"), False)]
    # What the build leaves out is listed, not a difference (a README, a .cpp); what it takes beyond
    # the packages' modules is compared (setuptools installs notes/draft.py as package data).
    assert report["not_compared"]["not_installed"] == ["megatron/core/README.md", "megatron/core/datasets/helpers.cpp"]
    text = cli("verify", "--installed", "--python", str(python))
    assert text.exit_code == 0
    assert "verified: megatron/core and megatron/training are exactly the patched tree of release test_v1" in text.stdout


def test_every_change_to_an_installed_copy_is_named(cli, checkout, tmp_path):
    python = install(checkout, tmp_path / "venv")
    core = site_packages(python) / "megatron" / "core"
    write_files(core, {"model.py": (core / "model.py").read_text().replace("33  # rocm", "3"), "extra.py": "X = 1\n",
                       "datasets/blended.py": None})
    # Compiled modules: the helpers the build makes are left out; one named like a module of the
    # tree is imported instead of it, and is a difference.
    write_files(core, {f"datasets/helpers_cpp{EXTENSION}": b"\x7fELF", f"datasets/blended{EXTENSION}": b"\x7fELF",
                       "__pycache__/model.cpython-311.pyc": b"pyc"})
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert {(d["path"], d["kind"]) for d in report["differences"]} == {
        ("megatron/core/model.py", "edited"), ("megatron/core/extra.py", "added"),
        ("megatron/core/datasets/blended.py", "deleted"), (f"megatron/core/datasets/blended{EXTENSION}", "shadowing")}
    assert [d["patches"] for d in report["differences"] if d["path"] == "megatron/core/model.py"] == [["rocm-model"]]
    assert report["not_compared"]["compiled"] == [f"megatron/core/datasets/helpers_cpp{EXTENSION}"]
    assert report["not_compared"]["pycache_dirs"] >= 1


def test_an_editable_install_is_the_checkout_itself_modes_included(cli, checkout, tmp_path):
    python = install(checkout, tmp_path / "venv", editable=True)
    code, report = verify(cli, python)
    assert code == 0, report
    assert [(p["prefix"], p["path"], p["checkout"]) for p in report["parts"]] == [
        ("megatron/core", str(checkout / "megatron/core"), True), ("megatron/training", str(checkout / "megatron/training"), True)]
    assert report["not_compared"]["not_installed"] == []  # a checkout holds the whole tree
    os.chmod(checkout / "megatron/core/model.py", 0o755)
    (checkout / "megatron/core/README.md").unlink()
    code, report = verify(cli, python)
    assert code == 1
    assert [(d["path"], d["kind"]) for d in report["differences"]] == [
        ("megatron/core/README.md", "deleted"), ("megatron/core/model.py", "mode-changed")]


def test_pythonpath_to_the_checkout_is_a_checkout(cli, checkout, tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    monkeypatch.chdir(tmp_path)
    code, report = verify(cli, Path("venv/bin/python"))  # a relative path, as typed
    assert code == 0, report
    assert all(part["checkout"] for part in report["parts"])


def test_the_unpatched_tree_installed_is_not_the_release(cli, upstream, tmp_path):
    python = install(upstream.path, tmp_path / "venv")
    code, report = verify(cli, python)
    assert code == 1
    assert report["release"] == "test_v1"
    assert {(d["path"], d["kind"]) for d in report["differences"]} == {
        ("megatron/core/model.py", "edited"), ("megatron/training/rocm.py", "deleted")}
    text = cli("verify", "--installed", "--python", str(python))
    assert "megatron/core and megatron/training are not the patched tree of release test_v1" in text.stdout


def test_an_overlay_is_verified_with_the_overlay(cli, project, upstream, tmp_path):
    overlay = write_series_dir(tmp_path / "overlay", patch_texts(upstream, PATCHES + OVERLAY)[len(PATCHES):])
    write_overlay_lock(overlay, project)
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    python = install(target, tmp_path / "venv")
    code, report = verify(cli, python, "--overlay", str(overlay))
    assert code == 0, report
    assert report["overlay"] == str(overlay)
    code, report = verify(cli, python)  # the release alone: the overlay's change is a difference
    assert code == 1 and [(d["path"], d["kind"]) for d in report["differences"]] == [("megatron/core/model.py", "edited")]


def test_without_release_only_releases_applied_here_are_compared(cli, project, upstream, checkout, tmp_path):
    write_files(upstream.path, {"megatron/core/model.py": MODEL + "# v2\n"})
    later = commit_all(upstream.path, "v2")
    gitcmd.run(gitcmd.open_repo(upstream.path), "tag", "v2.0")
    v2 = Upstream(upstream.path, "v2.0", later, gitcmd.tree_of(gitcmd.open_repo(upstream.path), later), later)
    v2_patch = {"megatron/core/model.py": replace_line(MODEL + "# v2\n", "return 3\n", "return 33  # rocm\n"), "megatron/training/rocm.py": "ROCM = 1\n"}
    v2_series = write_series(project.series_dir.parent.parent, patch_texts(v2, [("rocm-model", v2_patch)]), release="test_v2")
    write_lock(v2_series, locking.Pin(upstream.url, "v2.0", later))
    shutil.rmtree(store.commit_path(later))  # `lock` fetched it; on this machine only test_v1 was applied
    python = install(checkout, tmp_path / "venv")
    every_release = project.series_dir.parent  # patchsets/, not one release's folder

    def verify_with(*extra):
        result = cli("verify", "--installed", "--python", str(python), "--json", *extra, series_dir=every_release)
        return result.exit_code, json.loads(result.stdout)

    code, report = verify_with()
    assert code == 0 and report["release"] == "test_v1" and report["not_cached"] == ["test_v2"]
    assert not store.commit_path(later).exists()  # nothing fetched for a release never applied here
    code, report = verify_with("--release", "test_v2")
    assert code == 1 and report["release"] == "test_v2" and store.commit_path(later).exists()
    assert [(d["path"], d["kind"]) for d in report["differences"]] == [("megatron/core/model.py", "edited")]


def test_no_megatron_is_a_no_with_what_to_do(cli, tmp_path):
    python = make_venv(tmp_path / "venv")
    code, report = verify(cli, python)
    assert code == 1 and not report["found"] and not report["ok"]
    text = cli("verify", "--installed", "--python", str(python))
    assert text.exit_code == 1 and "imports no megatron package of the tree" in text.stdout


def test_no_code_of_the_package_runs(cli, checkout, tmp_path):
    """megatron/core/__init__.py writes a file if it is ever imported: locating it must not."""
    python = install(checkout, tmp_path / "venv")
    marker = tmp_path / "imported"
    init = site_packages(python) / "megatron" / "core" / "__init__.py"
    init.write_text(f"open({str(marker)!r}, 'w').close()\n")
    code, report = verify(cli, python)
    assert code == 1 and [(d["path"], d["kind"]) for d in report["differences"]] == [("megatron/core/__init__.py", "edited")]
    assert not marker.exists()


@pytest.mark.parametrize("args, message", [
    (["--installed", "--target", "x"], "--target does not go with --installed"),
    ([], "give --target DIR (a checkout) or --installed"),
    (["--installed", "--python", "/nonexistent/python"], "--python /nonexistent/python: no such interpreter"),
])
def test_usage(cli, args, message):
    result = cli("verify", *args)
    assert result.exit_code == ExitCode.USAGE and message in result.stderr, result.output


def test_the_current_interpreter_is_the_default(project, tmp_path, monkeypatch):
    """Without --python: the interpreter running rocmpatch (this test's, which has no megatron)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["verify", "--installed", "--json", "--series-dir", str(project.series_dir)])
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["executable"] == sys.executable
