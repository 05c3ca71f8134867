from __future__ import annotations

import subprocess
import sys

from rocmpatch.console import LazyConsole


def test_plain_text_is_written_as_is(capsys):
    console = LazyConsole()
    console.print("a [b] :warning: c", markup=False)
    LazyConsole(stderr=True).print("to stderr", markup=False)
    captured = capsys.readouterr()
    assert captured.out == "a [b] :warning: c\n"
    assert captured.err == "to stderr\n"


def test_anything_else_goes_through_rich(capsys):
    from rich.table import Table

    table = Table("name")
    table.add_row("x")
    LazyConsole().print(table)
    assert "name" in capsys.readouterr().out


def test_plain_text_does_not_import_rich():
    """Read-only commands print only plain lines; Rich's import is most of their budget's spare."""
    code = "import sys; from rocmpatch.console import out; out.print('x', markup=False); print('rich' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["x", "False"]


def test_a_table_in_a_pipe_is_never_cut(capsys, monkeypatch):
    """Piped or logged output (CI, | tee) keeps every patch name and path whole."""
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    long_path = "megatron/core/" + "/".join(["a_long_directory_name"] * 12) + "/file.py"
    table = Table("patch", "files")
    table.add_row("0001-a-patch-with-a-long-name-that-would-not-fit", long_path)
    LazyConsole().print(table)
    printed = capsys.readouterr().out
    assert long_path in printed and "0001-a-patch-with-a-long-name-that-would-not-fit" in printed
    assert "…" not in printed and max(map(len, printed.splitlines())) < len(long_path) + 80


def test_releases_piped_keeps_whole_lines():
    result = subprocess.run([sys.executable, "-m", "rocmpatch", "releases"], capture_output=True, text=True,
                            env={**__import__("os").environ, "COLUMNS": ""}, check=False)
    assert result.returncode == 0, result.stderr
    from rocmpatch.series import find_patchsets

    longest = max(find_patchsets()[0].releases(), key=len)
    assert "…" not in result.stdout and longest in result.stdout
