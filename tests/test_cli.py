from __future__ import annotations

import os
import re
from pathlib import Path

from rocmpatch import __version__
from rocmpatch.errors import ExitCode
from tests.cli_process import run_rocmpatch


def test_version_prints_the_pin(project):
    result = run_rocmpatch("--version", env={"ROCMPATCH_SERIES_DIR": str(project.series_dir)})
    assert result.returncode == 0
    assert f"rocmpatch {__version__}" in result.stdout
    assert re.search(r"release test_v1 \(default\): file://\S+ v1.0 [0-9a-f]{40}", result.stdout)


def test_every_command_has_help():
    for command in ("fetch", "apply", "verify", "status", "unapply", "check", "lock"):
        result = run_rocmpatch(command, "--help")
        assert result.returncode == 0 and "--series-dir" in result.stdout, command


def test_git_missing_is_one_clear_line(project, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run_rocmpatch("apply", "--target", str(tmp_path / "t"), "--series-dir", str(project.series_dir), env={"PATH": str(empty)})
    assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
    assert result.stderr.startswith("rocmpatch: error: git was not found on PATH")
    assert not (tmp_path / "t").exists()


def test_a_bug_exits_70_with_a_log(cli, monkeypatch, tmp_path):
    from rocmpatch.operations import applying

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(applying, "apply", broken)
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == ExitCode.INTERNAL
    log = re.search(r"the traceback is in (\S+\.log)", result.stderr).group(1)
    assert "ZeroDivisionError: boom" in open(log).read()


def test_ctrl_c_exits_130(cli, monkeypatch, tmp_path):
    from rocmpatch.operations import applying

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(applying, "apply", interrupted)
    assert cli("apply", "--target", str(tmp_path / "t")).exit_code == ExitCode.INTERRUPTED


def test_every_exit_code_is_documented():
    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "exit-codes.md")).read()
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}`" in text, code


def test_click_usage_errors_are_one_line_with_a_hint():
    from click.testing import CliRunner

    from rocmpatch.cli import app

    cases = {
        ("verfy",): "'rocmpatch --help' lists the commands",
        ("status",): "status: Missing option '--target'",
        ("recipe", "launch", "llama3-8b", "-t", "x", "--train-iters", "5"): "Megatron's own flags go after `--`",
        ("smoke", "-t", "x", "--device", "gpuu"): "'rocmpatch smoke --help' lists the options",
    }
    for args, expected in cases.items():
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 2, args
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("rocmpatch: error: ") and expected in lines[0], lines


def test_usage_errors_use_no_api_click_9_removes():
    """Click 8.5 deprecates get_text_stream (gone in 9): the one-line usage error must not need it."""
    import warnings

    from click.testing import CliRunner

    from rocmpatch.cli import app

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        result = CliRunner().invoke(app, ["verfy"])
    assert result.exit_code == 2 and result.stderr.startswith("rocmpatch: error: "), result.stderr


def test_click_has_an_upper_bound():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert re.search(r'"click>=[0-9.]+,<9"', text), "bound click below 9 (it removes APIs deprecated in 8.5)"


def test_a_group_without_arguments_prints_its_help_not_an_error():
    from click.testing import CliRunner

    from rocmpatch.cli import app

    for args in ([], ["recipe"], ["data"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code in (0, 2), args  # Click 8.2+ exits 2 after the help, older Clicks 0
        text = result.output
        assert text.startswith("Usage: rocmpatch") and "rocmpatch: error" not in text and "lists the commands" not in text, text
