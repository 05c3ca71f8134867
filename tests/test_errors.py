"""rocmpatch/errors.py: an error names its file on one line, whatever the file's name holds (shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmpatch import yamlio
from rocmpatch.errors import InvalidInput, shown


def test_invalid_input_quotes_a_path_with_a_line_break():
    assert InvalidInput(Path("a\nb/series.yaml"), "bad").message == "'a\\nb/series.yaml': bad"
    assert InvalidInput(Path("bad\udcff.yaml"), "bad").message == "'bad\\udcff.yaml': bad"
    assert InvalidInput("plain/series.yaml:3: series[0].name", "bad").message == "plain/series.yaml:3: series[0].name: bad"


def test_a_yaml_error_in_a_folder_with_a_line_break_is_one_line(tmp_path):
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    (folder / "release.yaml").write_text("a: 1\na: 2\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as caught:
        yamlio.read_document(folder / "release.yaml")
    assert "\n" not in str(caught.value)
    assert caught.value.message.startswith(repr(f"{folder / 'release.yaml'}:2") + ": duplicate key 'a'")
    assert caught.value.where == f"{folder / 'release.yaml'}:2"  # the raw place, for programs


def test_shown_quotes_only_what_would_break_the_line():
    assert shown("plain/dir") == "plain/dir"
    assert shown(Path("tab\there")) == "'tab\\there'"
