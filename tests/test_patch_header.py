"""A patch file's header written from its series.yaml entry: what `git format-patch` writes for the
same commit, the diff part never touched, read back field by field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rocmpatch import gitcmd, patch_header
from rocmpatch.errors import InvalidInput
from rocmpatch.schema import SeriesEntry, load_series
from rocmpatch.series import find_patchsets
from tests.fixtures import commit_all, write_files

ENTRY = SeriesEntry(
    name="sdpa-attention", file="0030-sdpa-attention.patch",
    summary="DotProductAttention runs torch scaled_dot_product_attention, causal by flag, with grouped heads as they are",
    description="megatron/core/transformer/dot_product_attention.py: the SDPA path.\nA second line, and\n\na second paragraph.",
    why="without Transformer Engine every attention layer materialized the scores:\n\"torch.OutOfMemoryError\".",
    author="rocmpatch developers", origin="rocmpatch", forwarded="no", last_update="2026-11-25",
)
DIFF = ("diff --git a/x.py b/x.py\nindex 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644\n"
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\r\n+a = 2\r\n")
TEXT = patch_header.MBOX_LINE + "\nSubject: [PATCH 03/10] old: words\n\nOld words.\n---\n x.py | 2 +-\n\n" + DIFF


def test_the_header_is_what_format_patch_writes_for_the_same_commit(tmp_path, monkeypatch):
    """git am of a rendered file and format-patch give the same header back (Subject folded at 78)."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no user git config changes the output
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for entry in (ENTRY, dataclasses.replace(ENTRY, author="A Person <person@example.com>", summary="short")):
        repo_path = tmp_path / entry.summary[:5]
        gitcmd.init_repo(repo_path)
        write_files(repo_path, {"x.py": "a = 1\n"})
        commit_all(repo_path, "first")
        write_files(repo_path, {"x.py": "a = 2\n"})
        repo = gitcmd.open_repo(repo_path)
        gitcmd.run(repo, "add", "-A")
        date = f"{entry.last_update}T00:00:00+0000"
        message = f"{entry.name}: {entry.summary}\n\n{entry.description}\n\nWhy: {entry.why}\n"
        author = patch_header.render(entry).splitlines()[1][len("From: "):]
        # Per call: gitcmd drops GIT_* variables inherited from the environment (a parent git's).
        gitcmd.run_bytes(repo, "-c", "user.name=t", "-c", "user.email=t@invalid", "commit", "-q", "--author", author, "-m", message,
                         env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        produced = gitcmd.format_patch(repo, "HEAD")
        assert patch_header.split(produced)[0] == patch_header.render(entry)


def test_with_header_keeps_the_diff_part_byte_for_byte():
    written = patch_header.with_header(ENTRY, TEXT)
    assert written.startswith(patch_header.render(ENTRY))
    assert written.endswith("---\n x.py | 2 +-\n\n" + DIFF)
    assert patch_header.split(written)[1] == patch_header.split(TEXT)[1] == " x.py | 2 +-\n\n" + DIFF
    assert patch_header.with_header(ENTRY, written) == written
    assert patch_header.split(DIFF) == ("", DIFF)  # a plain diff gets a header in front
    assert patch_header.with_header(ENTRY, DIFF) == patch_header.render(ENTRY) + DIFF


def test_a_header_reads_back_as_its_entry():
    written = patch_header.with_header(ENTRY, TEXT)
    found = patch_header.read(written)
    assert (found.name, found.summary, found.description, found.why, found.author, found.last_update) == \
        (ENTRY.name, ENTRY.summary, ENTRY.description, ENTRY.why, ENTRY.author, ENTRY.last_update)
    other = dataclasses.replace(ENTRY, summary="x", description="y", why="z", origin="https://example.com/commit/1")
    assert patch_header.entry_from_header(written, other) == dataclasses.replace(ENTRY, origin=other.origin)
    assert patch_header.read("From: x\n") == patch_header.Header()  # not a mail


def test_difference_names_the_first_field_and_its_line():
    written = patch_header.with_header(ENTRY, TEXT)
    assert patch_header.difference(ENTRY, written) is None
    lines = written.splitlines(keepends=True)
    assert patch_header.difference(dataclasses.replace(ENTRY, summary="other"), written) == patch_header.Difference("summary", 4)
    assert patch_header.difference(dataclasses.replace(ENTRY, author="someone else"), written) == patch_header.Difference("author", 2)
    assert lines[9] == "a second paragraph.\n"  # file line 10: the Subject takes lines 4 and 5
    edited = "".join(lines[:9]) + "An edited paragraph.\n" + "".join(lines[10:])
    assert patch_header.difference(ENTRY, edited) == patch_header.Difference("description", 10)
    numbered = written.replace("[PATCH]", "[PATCH 01/10]", 1)
    assert patch_header.difference(ENTRY, numbered) == patch_header.Difference("layout", 4)
    assert patch_header.difference(ENTRY, DIFF) == patch_header.Difference("author", 1)


@pytest.mark.parametrize("field, line", [("description", "---"), ("why", "diff --git a/x b/x"), ("description", "Index: x")])
def test_text_that_would_end_the_message_is_refused(field, line):
    entry = dataclasses.replace(ENTRY, **{field: f"first line\n{line}\nlast"})
    with pytest.raises(InvalidInput, match=rf"series\[3\]\.{field}: line 2 starts with") as raised:
        patch_header.render(entry, "series.yaml: series[3]")
    assert raised.value.exit_code == 3


def test_a_bad_date_names_last_update():
    with pytest.raises(InvalidInput, match=r"series\.yaml\.last-update: expected a date YYYY-MM-DD"):
        patch_header.render(dataclasses.replace(ENTRY, last_update="yesterday"))


# ------------------------------------------------------------------ full tree: every release's files

ROOT = Path(__file__).resolve().parents[1]
RELEASES = find_patchsets(ROOT / "patchsets")[0].releases()


@pytest.mark.upstream
@pytest.mark.parametrize("release", RELEASES)
def test_every_patch_file_is_what_git_am_and_format_patch_give_back(release, upstream_mirror, tmp_path, monkeypatch):
    """The whole series `git am`-ed onto the pin and exported again gives every file byte for byte:
    the headers `lock` writes are format-patch's, and each diffstat matches its diff."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no user or system git config changes the output
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    patchsets = find_patchsets(ROOT / "patchsets")[0]
    location = patchsets.location(release)
    files = [location.series_dir / entry.file for entry in load_series(location.series_dir).entries]
    pin = patchsets.lock_file().releases[release].upstream.commit
    repo = gitcmd.init_repo(tmp_path / "repo")
    gitcmd.fetch_commit(repo, f"file://{upstream_mirror}", pin)
    gitcmd.run(repo, "checkout", "-q", pin)
    gitcmd.run(repo, "-c", "user.name=test", "-c", "user.email=test@invalid", "am", "-q", *map(str, files))
    out = tmp_path / "out"
    gitcmd.run(repo, "format-patch", "-q", "--no-numbered", "--zero-commit", "--no-signature", "--full-index", "-o", str(out), f"{pin}..HEAD")
    produced = sorted(out.iterdir())
    assert len(produced) == len(files)
    for ours, theirs in zip(files, produced):
        assert ours.read_bytes() == theirs.read_bytes(), f"{ours.name} differs from format-patch output"
