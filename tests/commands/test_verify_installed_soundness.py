"""verify --installed answers from what the interpreter would import (issue 32): each case below
makes `import megatron...` load other code than the patched tree's, in a fake site-packages made
of real files (the patched checkout's files copied into a real venv, with a RECORD as pip writes
one), asked of that venv's real interpreter in a subprocess."""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import sys
from pathlib import Path

import pytest

from rocmpatch.errors import ExitCode
from tests.commands.test_verify_installed import EXTENSION, project, site_packages, upstream, verify  # noqa: F401  (fixtures)
from tests.fixtures import write_files
from tests.installing import make_venv

CACHE_TAG = sys.implementation.cache_tag  # cpython-311: the venv's interpreter is this one


def fake_install(checkout: Path, venv: Path, *, record: bool = True) -> Path:
    """The checkout's megatron/ copied into a new venv's site-packages, as a wheel install lays it
    out (a namespace megatron/ holding core/ and training/), with the distribution's RECORD."""
    python = make_venv(venv)
    site = site_packages(python)
    shutil.copytree(checkout / "megatron", site / "megatron")
    if record:
        info = site / "megatron_core-0.1.0.dist-info"
        info.mkdir()
        files = sorted(str(path.relative_to(site)) for path in (site / "megatron").rglob("*") if path.is_file())
        (info / "RECORD").write_text("".join(f"{path},sha256=x,1\n" for path in files) + "megatron_core-0.1.0.dist-info/RECORD,,\n")
    return python


def kinds(report: dict) -> dict[str, str]:
    return {d["path"]: d["kind"] for d in report["differences"]}


@pytest.fixture
def python(checkout, tmp_path):
    return fake_install(checkout, tmp_path / "venv")


def verified(cli, python, *extra) -> None:
    code, report = verify(cli, python, *extra)
    assert code == 0 and report["ok"], report["differences"]


def test_a_copy_of_the_tree_is_verified_module_by_module(cli, python):
    code, report = verify(cli, python)
    assert code == 0, report["differences"]
    assert report["modules"] == 10  # megatron, core, core.model, core.datasets(.blended), core.notes(.draft), training(.train, .rocm)
    text = cli("verify", "--installed", "--python", str(python))
    assert "each of its 10 modules imports from the tree's file" in text.stdout


def test_each_module_name_is_what_pythons_file_finder_takes():
    from rocmpatch.installed import TreeModule, tree_modules

    listing = dict.fromkeys(["megatron/core/__init__.py", "megatron/core/x.py", "megatron/core/x/__init__.py",  # a package wins
                             "megatron/core/y.py", "megatron/core/y/data.json",  # a module before a namespace directory
                             "megatron/core/z/data.json", "megatron/core/not-a-name/m.py", "megatron/core/t.pyi"])
    assert tree_modules(listing) == {
        "megatron": TreeModule("megatron", "namespace"), "megatron.core": TreeModule("megatron/core/__init__.py", "package"),
        "megatron.core.x": TreeModule("megatron/core/x/__init__.py", "package"), "megatron.core.y": TreeModule("megatron/core/y.py", "module"),
        "megatron.core.z": TreeModule("megatron/core/z", "namespace")}


# 1. a module file where the tree has a package ------------------------------------------------------


def test_a_module_replacing_a_package_is_shadowing(cli, python):
    site = site_packages(python)
    shutil.rmtree(site / "megatron/training")
    (site / "megatron/training.py").write_text("print('other code')\n")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/training.py": "shadowing"}
    detail = report["differences"][0]["detail"]
    assert str(site / "megatron/training.py") in detail and "megatron/training/__init__.py" in detail
    text = cli("verify", "--installed", "--python", str(python))
    assert text.exit_code == 1 and "shadowing      megatron/training.py" in text.stdout


# 2. an earlier sys.path entry -------------------------------------------------------------------------


def test_an_earlier_path_entry_shadows_the_installed_package(cli, python, tmp_path, monkeypatch):
    early = tmp_path / "early"
    write_files(early, {"megatron/training.py": "print('other code')\n"})
    monkeypatch.setenv("PYTHONPATH", str(early))
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/training.py": "shadowing"}
    assert str(early / "megatron/training.py") in report["differences"][0]["detail"]


def test_an_earlier_path_entry_with_the_trees_bytes_is_the_tree(cli, python, checkout, tmp_path, monkeypatch):
    """What runs is proven by the bytes of the file Python loads, wherever it lies."""
    early = tmp_path / "early"
    shutil.copytree(checkout / "megatron/training", early / "megatron/training")
    monkeypatch.setenv("PYTHONPATH", str(early))
    code, report = verify(cli, python)
    assert code == 0, report["differences"]
    assert [part["path"] for part in report["parts"]][-1] == str(early / "megatron/training")
    (early / "megatron/training/rocm.py").unlink()  # then what the series adds is missing where Python looks
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED and kinds(report) == {"megatron/training/rocm.py": "deleted"}


# 3. and 4. extension modules ---------------------------------------------------------------------------


def test_a_native_init_turns_the_namespace_into_a_native_package(cli, python):
    site = site_packages(python)
    (site / f"megatron/__init__{EXTENSION}").write_bytes(b"\x7fELF not loaded by the lookup")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {f"megatron/__init__{EXTENSION}": "shadowing"}
    assert "native package" in report["differences"][0]["detail"]


def test_an_extension_beside_a_directory_without_init_is_what_python_loads(cli, python):
    site = site_packages(python)
    (site / f"megatron/core/notes{EXTENSION}").write_bytes(b"\x7fELF")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {f"megatron/core/notes{EXTENSION}": "shadowing"}
    assert report["not_compared"]["compiled"] == []  # named as a difference, not left out


def test_an_extension_beside_a_package_with_init_is_never_loaded(cli, python):
    site = site_packages(python)
    (site / f"megatron/core/datasets{EXTENSION}").write_bytes(b"\x7fELF")  # the package datasets/ wins
    (site / f"megatron/core/datasets/__init__{EXTENSION}").write_bytes(b"\x7fELF")  # ...but its own native __init__ wins over __init__.py
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {f"megatron/core/datasets/__init__{EXTENSION}": "shadowing"}
    assert report["not_compared"]["compiled"] == [f"megatron/core/datasets{EXTENSION}"]


# 5. what a site's start-up does: meta-path hooks, modules imported before anything --------------------

HOOK = ("import sys; exec(\"import sys\\nclass Finder:\\n @staticmethod\\n def find_spec(name, path=None, target=None):\\n"
        "  if name == 'megatron.training':\\n   import importlib.util\\n   return importlib.util.spec_from_loader(name, Loader())\\n"
        "class Loader:\\n def create_module(self, spec): return None\\n def exec_module(self, module): module.SERVED = True\\n"
        "sys.meta_path.insert(0, Finder)\", {})\n")


def test_a_meta_path_hook_from_a_pth_file_is_unverifiable(cli, python):
    (site_packages(python) / "zz-hook.pth").write_text(HOOK)
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/training/__init__.py": "unverifiable"}
    assert "Loader" in report["differences"][0]["detail"] and "meta-path" in report["differences"][0]["detail"]


def test_a_module_a_pth_file_imports_at_start_up_is_unverifiable(cli, python):
    (site_packages(python) / "zz-preload.pth").write_text(
        "import sys, types; sys.modules['megatron.core.model'] = types.ModuleType('megatron.core.model')\n")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/core/model.py": "unverifiable"}
    assert "already imported when the interpreter starts" in report["differences"][0]["detail"]


def test_a_hook_that_fails_is_unverifiable(cli, python):
    (site_packages(python) / "zz-broken.pth").write_text(
        "import sys; exec(\"class Broken:\\n @staticmethod\\n def find_spec(name, path=None, target=None):\\n"
        "  if name.startswith('megatron.core.d'): raise RuntimeError('hook broke')\\nsys.meta_path.insert(0, Broken)\")\n")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/core/datasets/__init__.py": "unverifiable"}
    assert "RuntimeError: hook broke" in report["differences"][0]["detail"]


# 6. a part that is missing -----------------------------------------------------------------------------


@pytest.mark.parametrize("record", [True, False])
def test_megatron_core_deleted_is_a_difference(cli, checkout, tmp_path, record):
    python = fake_install(checkout, tmp_path / "venv", record=record)
    shutil.rmtree(site_packages(python) / "megatron/core")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED and report["found"]  # megatron/training is there
    assert kinds(report) == {"megatron/core/": "deleted"}
    assert "import megatron.core finds nothing" in report["differences"][0]["detail"]


def test_a_part_the_distribution_installed_is_required(cli, checkout, tmp_path):
    python = fake_install(checkout, tmp_path / "venv")
    shutil.rmtree(site_packages(python) / "megatron/training")
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED and kinds(report) == {"megatron/training/": "deleted"}
    assert "RECORD" in report["differences"][0]["detail"]
    # Without a distribution saying it installed megatron/training (a core-only build): not required.
    python = fake_install(checkout, tmp_path / "venv-core-only", record=False)
    shutil.rmtree(site_packages(python) / "megatron/training")
    verified(cli, python)


def test_a_checkout_missing_a_part_is_a_difference(cli, checkout, tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    shutil.rmtree(checkout / "megatron/training")
    code, report = verify(cli, tmp_path / "venv/bin/python")
    assert code == ExitCode.CHECK_FAILED and kinds(report) == {"megatron/training/": "deleted"}


# 7. bytecode: --strict ---------------------------------------------------------------------------------


def cache_file(source: Path, optimization: str = "") -> Path:
    return Path(importlib.util.cache_from_source(str(source), optimization=optimization))


def test_strict_proves_the_bytecode_python_would_run(cli, python, tmp_path):
    core = site_packages(python) / "megatron/core"
    for module in ("model.py", "__init__.py", "datasets/blended.py"):  # as pip compiles them: timestamps
        py_compile.compile(str(core / module), cfile=str(cache_file(core / module)), doraise=True)
    py_compile.compile(str(core / "model.py"), cfile=str(cache_file(core / "model.py", "1")), optimize=1, doraise=True)
    verified(cli, python, "--strict")
    # An unchecked-hash .pyc (PEP 552) runs whatever its source says.
    other = tmp_path / "other.py"
    other.write_text("def layer3():\n    return 'not the tree'\n")
    py_compile.compile(str(other), cfile=str(cache_file(core / "model.py")), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    verified(cli, python)  # without --strict bytecode is not read (said in the text output)
    text = cli("verify", "--installed", "--python", str(python))
    assert text.exit_code == 0 and "--strict also proves that the bytecode" in text.stdout
    code, report = verify(cli, python, "--strict")
    assert code == ExitCode.CHECK_FAILED and report["strict"]
    pyc = f"megatron/core/__pycache__/model.{CACHE_TAG}.pyc"
    assert kinds(report) == {pyc: "bytecode"}
    assert "unchecked-hash bytecode whose code is not the source's" in report["differences"][0]["detail"]
    text = cli("verify", "--installed", "--strict", "--python", str(python))
    assert text.exit_code == 1 and f"bytecode       {pyc}" in text.stdout


def test_strict_sees_a_timestamp_pyc_made_to_match_the_source(cli, python, tmp_path):
    from importlib._bootstrap_external import _code_to_timestamp_pyc

    source = site_packages(python) / "megatron/core/datasets/blended.py"
    info = source.stat()
    code = compile("BLENDED = 'not the tree'\n", str(source), "exec")
    cache_file(source).parent.mkdir(exist_ok=True)
    cache_file(source).write_bytes(_code_to_timestamp_pyc(code, int(info.st_mtime), info.st_size))
    verified(cli, python)
    code, report = verify(cli, python, "--strict")
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {f"megatron/core/datasets/__pycache__/blended.{CACHE_TAG}.pyc": "bytecode"}
    # Bytes that do not load as code at all: not proven either.
    cache_file(source).write_bytes(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + b"\0" * 8 + b"\xff\xfe garbage")
    code, report = verify(cli, python, "--strict")
    assert code == ExitCode.CHECK_FAILED and "does not load" in report["differences"][0]["detail"]


def test_sourceless_bytecode_in_place_of_a_module_is_shadowing(cli, python, tmp_path):
    core = site_packages(python) / "megatron/core"
    py_compile.compile(str(core / "model.py"), cfile=str(core / "model.pyc"), doraise=True)
    (core / "model.py").unlink()
    code, report = verify(cli, python)
    assert code == ExitCode.CHECK_FAILED
    assert kinds(report) == {"megatron/core/model.py": "deleted", "megatron/core/model.pyc": "shadowing"}
    assert "bytecode without its source" in report["differences"][1]["detail"]


# the interpreter's answer ------------------------------------------------------------------------------


def test_what_a_site_prints_on_stdout_does_not_matter(cli, python):
    (site_packages(python) / "zz-noise.pth").write_text(
        "import sys, atexit; print('[1]'); atexit.register(lambda: print('[\"not\", \"an\", \"object\"]'))\n")
    verified(cli, python)


@pytest.mark.parametrize("answer", ["[1]", "{\"executable\": 1}", "not json", ""])
def test_an_answer_in_another_form_is_exit_8_in_one_line(cli, tmp_path, answer):
    """An 'interpreter' that writes something else where the answer goes (its argv: -c SCRIPT MODE OUT)."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nprintf '%s' '{answer}' > \"$4\"\necho '{{}}'\n")
    fake.chmod(0o755)
    result = cli("verify", "--installed", "--python", str(fake))
    assert result.exit_code == ExitCode.ENVIRONMENT, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"rocmpatch: error: --python {fake}: ") and lines[1].startswith("  hint: ")
    assert "answered in a form rocmpatch does not read" in lines[0] or "could not say" in lines[0]
    assert result.stdout == ""


def test_no_module_is_imported_in_the_asked_interpreter(cli, python):
    """Every module of the tree writes a marker when it runs: none may run while it is looked up."""
    marker = site_packages(python).parent / "ran"
    for path in (site_packages(python) / "megatron").rglob("*.py"):
        path.write_text(f"open({str(marker)!r}, 'a').write({str(path)!r} + '\\n')\n" + path.read_text())
    code, report = verify(cli, python, "--strict")
    assert code == ExitCode.CHECK_FAILED and set(kinds(report).values()) == {"edited"}
    assert not marker.exists()
    assert not list((site_packages(python) / "megatron").rglob("__pycache__"))  # nothing compiled and written either
