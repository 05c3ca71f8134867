"""rocmpatch package: a verified checkout built by its own build backend into a wheel whose version
carries a local label, which pip's resolver takes for the framework's `megatron-core==X.Y.Z` and
which `verify --installed` then finds to be the patched tree. Real git, real pip, offline."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocmpatch.errors import ExitCode
from tests.fixtures import make_series, replace_line, tagged_upstream
from tests.installing import make_venv

# A megatron-core shaped tree whose version comes from package_info.py, as upstream's does.
PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "megatron-core"
dynamic = ["version"]
dependencies = []

[tool.setuptools.dynamic]
version = { attr = "megatron.core.package_info.__version__" }

[tool.setuptools.packages.find]
include = ["megatron.core", "megatron.core.*", "megatron.training", "megatron.training.*"]
"""
MODEL = "".join(f"def layer{i}():\n    return {i}\n\n" for i in range(12))
FILES = {
    "pyproject.toml": PYPROJECT,
    "megatron/core/__init__.py": "",
    "megatron/core/package_info.py": "MAJOR, MINOR, PATCH = 0, 19, 1\n__version__ = '.'.join(map(str, (MAJOR, MINOR, PATCH)))\n",
    "megatron/core/model.py": MODEL,
    "megatron/training/__init__.py": "",
}
PATCHES = [("rocm-model", {"megatron/core/model.py": replace_line(MODEL, "return 3\n", "return 33  # rocm\n")})]


@pytest.fixture
def upstream(tmp_path):
    return tagged_upstream(tmp_path, FILES)


@pytest.fixture
def project(tmp_path, upstream):
    return make_series(tmp_path / "proj", upstream, PATCHES)


def package(cli, checkout, out, *extra):
    return cli("package", "--target", str(checkout), "--out", str(out), "--no-build-isolation", "--python", sys.executable, *extra)


def resolve(requirement: str, wheels: Path) -> subprocess.CompletedProcess:
    """pip's resolver, offline, over the wheels directory only: what `pip install REQ` would take."""
    return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--quiet",
                           "--disable-pip-version-check", "--find-links", str(wheels), "--report", "-", requirement],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def built(cli, project, checkout, tmp_path):
    out = tmp_path / "dist"
    result = package(cli, checkout, out, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_wheel_is_the_labelled_tree_that_pip_takes_for_the_pin_and_that_verifies_installed(cli, built, project, tmp_path):
    """One build (the slow part), three answers: its name and metadata, pip's resolver, verify --installed."""
    tree = built["tree"]
    assert built["version"] == f"0.19.1+rocmpatch.{tree[:8]}" and built["satisfies"] == "==0.19.1"
    assert built["release"] == project.release and built["overlay"] is None
    wheel = Path(built["wheel"])
    assert wheel.name.startswith(f"megatron_core-0.19.1+rocmpatch.{tree[:8]}-") and wheel.suffix == ".whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"megatron_core-{built['version']}.dist-info/"
        assert f"{info}METADATA" in names and f"{info}RECORD" in names
        assert f"Version: {built['version']}\n" in archive.read(f"{info}METADATA").decode()
        assert b"return 33  # rocm" in archive.read("megatron/core/model.py")  # the patched bytes, unchanged

    taken = resolve("megatron-core==0.19.1", wheel.parent)
    assert taken.returncode == 0, taken.stderr
    assert [item["metadata"]["version"] for item in json.loads(taken.stdout)["install"]] == [built["version"]]
    assert resolve("megatron-core==0.19.2", wheel.parent).returncode != 0  # another release is not faked

    python = make_venv(tmp_path / "venv")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
                           "--disable-pip-version-check", built["wheel"]], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = cli("verify", "--installed", "--python", str(python), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["release"] and report["expected_tree"] == tree, report


def test_an_edited_checkout_is_not_packaged(cli, project, checkout, tmp_path):
    (checkout / "megatron/core/model.py").write_text(MODEL)
    out = tmp_path / "dist"
    result = package(cli, checkout, out)
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "only a verified tree is packaged" in result.output and not out.exists()


@pytest.mark.parametrize("where", ["inside", "file"])
def test_a_bad_out_directory_is_refused_before_any_work(cli, project, checkout, tmp_path, where):
    out = checkout / "dist" if where == "inside" else tmp_path / "file"
    if where == "file":
        out.write_text("x")
    result = package(cli, checkout, out)
    assert result.exit_code == ExitCode.USAGE and f"--out {out}" in result.output
    assert not (checkout / "dist").exists()


def test_a_bad_label_is_refused(cli, project, checkout, tmp_path):
    result = package(cli, checkout, tmp_path / "dist", "--label", "Not_OK!")
    assert result.exit_code == ExitCode.INVALID_INPUT and "--label" in result.output
    assert not (tmp_path / "dist").exists()


def test_a_failed_build_names_pips_error_and_keeps_the_log(cli, project, checkout, tmp_path):
    python = make_venv(tmp_path / "bare")  # no pip in it
    result = cli("package", "--target", str(checkout), "--out", str(tmp_path / "dist"), "--python", str(python))
    assert result.exit_code == ExitCode.ENVIRONMENT and "building the wheel" in result.output
    assert (tmp_path / "dist" / "rocmpatch-package.log").is_file()
