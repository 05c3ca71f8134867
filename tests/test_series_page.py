"""docs/patches-<release>.md written from series.yaml: the blocks are series.yaml's words, everything
around them is the page's own and stays where it is."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rocmpatch import series_page
from rocmpatch.schema import Series, SeriesEntry


def entry(name: str, number: int, **fields) -> SeriesEntry:
    values = dict(name=name, file=f"{number:04d}-{name}.patch", summary=f"{name} does one thing",
                  description=f"What {name} changes.", why=f"Why {name} is needed.", author="tests",
                  origin="rocmpatch", forwarded="no", last_update="2026-11-22")
    return SeriesEntry(**{**values, **fields})


def series(*entries: SeriesEntry) -> Series:
    return Series(Path("patchsets") / "test_v1", tuple(entries))


def empty(name: str) -> str:
    return series_page.START.format(name=name) + "\n" + series_page.END.format(name=name) + "\n"


def names_in(page: str) -> list[str]:
    return re.findall(r"^<!-- patch (\S+?):", page, re.M)


A, B, C = entry("alpha", 1), entry("beta", 2), entry("gamma", 3)


def test_blocks_are_written_and_the_prose_around_them_kept():
    page = "# Title\n\nIntro.\n\n" + empty("alpha") + "\n**Tested.** By hand.\n\n## Part 2\n\n" + empty("beta") + "\nEnd.\n"
    written = series_page.render(series(A, B), page)
    assert written.startswith("# Title\n\nIntro.\n\n" + series_page.block(A, "test_v1") + "\n**Tested.** By hand.\n\n## Part 2\n\n")
    assert written.endswith(series_page.block(B, "test_v1") + "\nEnd.\n")
    assert "### 0001 alpha\n\nalpha does one thing.\n\n**Why.** Why alpha is needed.\n\n**What it changes.** What alpha changes.\n" in written
    assert "[`0001-alpha.patch`](../patchsets/test_v1/0001-alpha.patch)" in written
    assert series_page.render(series(A, B), written) == written


def test_a_new_patch_goes_before_the_next_one_and_a_removed_one_goes():
    page = "# Title\n\n" + empty("alpha") + "\nAlpha's tests.\n\n" + empty("gamma") + "\nGamma's tests.\n"
    written = series_page.render(series(A, B, C), page)
    assert names_in(written) == ["alpha", "beta", "gamma"]
    assert "Alpha's tests.\n\n" + series_page.block(B, "test_v1") + "\n" + series_page.block(C, "test_v1") in written
    assert series_page.render(series(A, B, C), written + "\n" + empty("alpha")) == written + "\n"  # twice: once
    removed = series_page.render(series(A, C), written)
    assert names_in(removed) == ["alpha", "gamma"] and "Alpha's tests.\n\n\n" + series_page.block(C, "test_v1") in removed
    assert names_in(series_page.render(series(A, B, C, entry("delta", 4)), written))[-1] == "delta"  # none follows: at the end


def test_a_page_without_blocks_gets_them_at_the_end():
    written = series_page.render(series(A, B), "# Title\n\nProse.\n")
    assert written.startswith("# Title\n\nProse.\n\n" + series_page.block(A, "test_v1") + "\n" + series_page.block(B, "test_v1"))


def test_plain_text_shows_as_written_in_markdown():
    """series.yaml holds plain text (and `code`): nothing in it becomes emphasis, HTML or a list."""
    markdown_it = pytest.importorskip("markdown_it")
    tricky = entry("tricky", 9, summary="scaled_*_softmax_cuda and __init__.py",
                   description="a <the local spec> tag, g * y, `a_*b` code,\n- not a list\n1. not a list\n# not a heading\n(_private_name) x",
                   why="16 < sk <= 4096\n> not a quote")
    text = "".join(series_page.block(tricky, "test_v1").splitlines(keepends=True)[1:-1])  # inside the two comments
    tokens = markdown_it.MarkdownIt("commonmark").parse(text)
    kinds = {t.type for t in tokens} | {c.type for t in tokens for c in (t.children or [])}
    assert not kinds & {"em_open", "html_inline", "html_block", "bullet_list_open", "ordered_list_open", "blockquote_open"}, kinds
    assert {t.tag for t in tokens if t.type == "heading_open"} == {"h3"}
    shown = "".join(c.content for t in tokens for c in (t.children or []) if c.type in ("text", "code_inline"))
    for words in ("scaled_*_softmax_cuda and __init__.py", "<the local spec>", "a_*b", "- not a list", "# not a heading", "(_private_name)", "16 < sk <= 4096"):
        assert words in shown, words


def test_refresh_writes_only_an_existing_page(tmp_path):
    page = tmp_path / "docs" / "patches-test_v1.md"
    assert series_page.refresh(page, series(A), write=True) is None and not page.exists()
    page.parent.mkdir()
    page.write_text("# Title\n")
    page.chmod(0o644)
    assert series_page.refresh(page, series(A), write=False) == 2
    assert page.read_text() == "# Title\n"
    assert series_page.refresh(page, series(A), write=True) == 2
    assert names_in(page.read_text()) == ["alpha"] and page.stat().st_mode & 0o777 == 0o644
    assert series_page.refresh(page, series(A), write=False) is None
    assert series_page.page_path(tmp_path / "patchsets", "test_v1") == page
    assert series_page.refresh(page, series(dataclasses.replace(A, why="Another reason.")), write=False) == 8
