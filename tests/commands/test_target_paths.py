"""A --target that is no checkout's top gets one line saying what the path is (issue 33): missing, a
file, a directory inside a checkout (naming the checkout's top), or a directory that is no checkout;
for every command that takes one, with exit 5 and nothing created or changed."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode

GIT_COMMANDS = ("verify", "status", "unapply")


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(("rocmpatch: error: ", "  hint: "))]


@pytest.fixture
def paths(cli, tmp_path):
    """A checkout made by apply, a directory inside it, a file, a plain directory, a missing path."""
    checkout = tmp_path / "t"
    assert cli("apply", "--target", str(checkout)).exit_code == 0
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a checkout\n")
    (tmp_path / "file.txt").write_text("x\n")
    return {"checkout": checkout, "inside": checkout / "pkg", "file": tmp_path / "file.txt", "plain": plain,
            "missing": tmp_path / "missing"}


def status_of(checkout):
    return subprocess.run(["git", "-C", str(checkout), "status", "--porcelain"], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("command", GIT_COMMANDS)
def test_each_kind_of_path_is_named(cli, paths, command):
    before = status_of(paths["checkout"])
    expected = {
        "missing": (f"{paths['missing']}: does not exist", "apply --target DIR"),
        "file": (f"{paths['file']}: is a file, not a checkout's directory", "give the checkout's directory"),
        "inside": (f"{paths['inside']}: is inside the checkout {paths['checkout']}, not its top", f"give --target {paths['checkout']}"),
        "plain": (f"{paths['plain']}: is a directory but no git checkout", "apply --target DIR"),
    }
    for kind, (line, hint) in expected.items():
        result = cli(command, "--target", str(paths[kind]))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (kind, result.output)
        errors = error_lines(result)
        assert errors[0] == f"rocmpatch: error: {line}", (kind, errors)
        assert len(errors) == 2 and hint in errors[1] and "does not exist yet" not in errors[1], (kind, errors)
    assert not paths["missing"].exists() and status_of(paths["checkout"]) == before
    assert sorted(p.name for p in paths["plain"].iterdir()) == ["notes.txt"]


def test_apply_names_the_path_and_says_where_it_makes_a_checkout(cli, paths):
    before = status_of(paths["checkout"])
    expected = {
        "file": f"{paths['file']}: is a file, not a checkout's directory",
        "inside": f"{paths['inside']}: is inside the checkout {paths['checkout']}, not its top",
        "plain": f"{paths['plain']}: is a directory but no git checkout",
    }
    for kind, line in expected.items():
        result = cli("apply", "--target", str(paths[kind]))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (kind, result.output)
        errors = error_lines(result)
        assert errors[0] == f"rocmpatch: error: {line}" and "a directory that does not exist yet" in errors[1], (kind, errors)
    assert f"--target {paths['plain'] / 'Megatron-LM'}" in error_lines(cli("apply", "--target", str(paths["plain"])))[1]
    assert status_of(paths["checkout"]) == before and paths["file"].read_text() == "x\n"
    dry = cli("apply", "--target", str(paths["missing"]), "--dry-run")  # missing: apply creates it
    assert dry.exit_code == 0 and f"would create {paths['missing']} (it does not exist yet)" in dry.stdout
    assert not paths["missing"].exists()


def megatron_like(root):
    """A git checkout holding the files smoke, recipe launch and data prepare look for."""
    for name in ("megatron/core/__init__.py", "pretrain_gpt.py", "tools/preprocess_data.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


TREE_COMMANDS = {
    "smoke": (["smoke", "--device", "cpu"], "megatron/core/__init__.py"),
    "recipe launch": (["recipe", "launch", "small-radeon", "--mock-data", "--device", "cpu"], "pretrain_gpt.py"),
    "data prepare": (["data", "prepare", "doc.txt", "--train-tokenizer", "-o", "out"], "tools/preprocess_data.py"),
}


@pytest.mark.parametrize("command", TREE_COMMANDS)
def test_commands_that_run_the_tree_name_the_path_too(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    args, needs = TREE_COMMANDS[command]
    tree = megatron_like(tmp_path / "mlm")
    (tmp_path / "file.txt").write_text("x\n")
    (tmp_path / "doc.txt").write_text("a document\n")
    (tmp_path / "plain").mkdir()
    expected = {
        tmp_path / "missing": "does not exist",
        tmp_path / "file.txt": "is a file, not a checkout's directory",
        tree / "megatron": f"is inside the checkout {tree}, not its top",
        tmp_path / "plain": f"has no {needs}, so it is no Megatron-LM tree",
    }
    for path, what in expected.items():
        result = CliRunner().invoke(app, [*args, "--target", str(path)])
        assert result.exit_code == ExitCode.TARGET_REFUSED, (path, result.output)
        assert error_lines(result)[0] == f"rocmpatch: error: {path}: {what}", (path, result.stderr)
    assert "--target " + str(tree) in error_lines(CliRunner().invoke(app, [*args, "--target", str(tree / "megatron")]))[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt", "file.txt", "mlm", "plain"]
