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
