"""Tables keep release names, commits and paths whole at any width: wrapped, never shortened with an
ellipsis (rocmpatch/tables.py), checked on `releases` and `status` at COLUMNS=80 and 40."""

from __future__ import annotations

import io
import subprocess

import pytest

from rocmpatch.schema import load_lock_file
from rocmpatch.tables import Table
from tests.cli_process import ROOT, run_rocmpatch
from tests.fixtures import make_series, replace_line, MODULE_A

ELLIPSIS = "…"
LONG_PATH = "megatron/core/transformer/moe/token_dispatcher_with_a_long_name.py"


def column(text: str, index: int) -> str:
    """A table column's cell pieces joined (a value folded over lines reads whole again)."""
    pieces = [line.split("│")[index + 1].strip() for line in text.splitlines() if line.startswith("│")]
    return "".join(pieces)


@pytest.mark.parametrize("columns", [80, 40])
def test_releases_keeps_names_and_commits_whole(columns):
    release_dir = ROOT / "patchsets"
    result = run_rocmpatch("releases", env={"COLUMNS": str(columns), "ROCMPATCH_SERIES_DIR": str(release_dir)})
    assert result.returncode == 0, result.stderr
    assert ELLIPSIS not in result.stdout
    for line in result.stdout.splitlines():  # the table fits; a record line may be longer (the terminal wraps it)
        assert len(line) <= columns or not line.startswith(("┃", "│", "┏", "└")), line
    words = result.stdout.split()
    pinned = load_lock_file(ROOT / "upstream.lock").releases
    for name, lock in pinned.items():  # every release folder's name and short commit, whole
        assert name in words and lock.upstream.commit[:12] in words, name


def test_status_wraps_paths_at_80_and_keeps_them_whole_at_40(tmp_path, upstream):
    project = make_series(tmp_path / "proj", upstream, patches=[
        ("a-patch-with-a-rather-long-name-for-this-table", {"pkg/a.py": replace_line(MODULE_A + "# second\n", "return 3\n", "return 33\n"),
                                                            LONG_PATH: "X = 1\n"}),
    ])
    target = tmp_path / "clone"
    env = {"ROCMPATCH_SERIES_DIR": str(project.series_dir)}
    assert run_rocmpatch("apply", "--target", str(target), "--upstream-url", upstream.url, env=env).returncode == 0

    wide = run_rocmpatch("status", "--target", str(target), env={**env, "COLUMNS": "80"})
    assert wide.returncode == 0, wide.stderr
    assert ELLIPSIS not in wide.stdout
    assert all(len(line) <= 80 for line in wide.stdout.splitlines() if line.startswith("│"))
    assert "a-patch-with-a-rather-long-name-for-this-table" in wide.stdout  # the name: on one line
    assert LONG_PATH in column(wide.stdout, 3) and "pkg/a.py" in column(wide.stdout, 3)  # the path: wrapped

    narrow = run_rocmpatch("status", "--target", str(target), env={**env, "COLUMNS": "40"})
    assert narrow.returncode == 0, narrow.stderr
    assert ELLIPSIS not in narrow.stdout
    lines = narrow.stdout.splitlines()
    assert "  patch: a-patch-with-a-rather-long-name-for-this-table" in lines
    assert f"         {LONG_PATH}" in lines or f"  files: {LONG_PATH}" in lines


def test_width_plans():
    table = Table("name", "commit", "note", whole=("name", "commit"))
    table.add_row("r2026.08.1 (default)", "5be9626709af", "a rather long note that can wrap anywhere")
    assert table.column_widths(200) is None  # fits as it is
    widths = table.column_widths(60)  # every word fits: only lines wrap, at spaces
    assert widths[0] >= len("r2026.08.1") and widths[1] == 12 and sum(widths) <= 60 - 10
    widths = table.column_widths(42)  # the whole columns keep their words, the note folds
    assert widths[:2] == [len("r2026.08.1"), 12] and sum(widths) <= 42 - 10
    assert table.column_widths(20) == []  # not even the name fits: records instead of a table


def test_records_print_each_value_on_its_own_line():
    from rich.console import Console

    table = Table("name", "files", whole=("files",), title="t")
    table.add_row("first", f"{LONG_PATH}\npkg/b.py")
    console = Console(width=30, record=True, file=io.StringIO(), soft_wrap=True)
    console.print(table)
    assert console.export_text().splitlines() == ["t", "first", f"  files: {LONG_PATH}", "         pkg/b.py"]


def test_unknown_whole_column_is_a_bug():
    with pytest.raises(ValueError):
        Table("a", whole=("b",))


def test_no_command_builds_a_rich_table_itself():
    """Every table goes through rocmpatch.tables (drift's folds already; rebase's is left to its owner)."""
    found = subprocess.run(["git", "grep", "-l", "from rich.table import Table", "--", "rocmpatch"], cwd=ROOT,
                           capture_output=True, text=True).stdout.split()
    assert set(found) <= {"rocmpatch/tables.py", "rocmpatch/commands/drift.py", "rocmpatch/commands/rebase.py"}, found
