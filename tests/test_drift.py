from __future__ import annotations

import pytest

from rocmpatch import gitcmd
from rocmpatch.operations import drift
from tests.upstream_history import make_history, parsed_patches


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return make_history(tmp_path_factory.mktemp("drift"))


@pytest.fixture(scope="module")
def report(history):
    repo = gitcmd.open_repo(history.repo)
    return drift.run_drift(repo, parsed_patches(history), "v1.0", "main")


def by_name(report):
    return {p.name: p for p in report.patches}


def test_walk_starts_at_the_merge_base_of_pin_and_ref(report, history):
    assert report.base == history.commits["root"]
    assert report.from_commit == history.pin
    assert report.from_on_ref is False and report.to_json()["from_on_ref"] is False  # the pin is on a release branch
    assert report.to.id == history.commits["m7"]
    assert report.commits == 7  # m1, m2, m3 (merge), m4..m7 and nothing from the side branch
    assert report.candidates == 6  # m1 only touches README
    assert not report.ok


def test_a_break_brought_in_by_a_merge_names_the_merge(report, history):
    alpha = by_name(report)["alpha"]
    assert alpha.state == drift.BROKEN
    assert alpha.first_bad.id == history.commits["m3"]
    assert alpha.first_bad.subject == "Merge branch 'side'"
    assert alpha.last_good.id == history.commits["m2"]
    assert (alpha.file, alpha.hunk) == ("a.py", 1)
    assert "line 6" in alpha.reason


def test_a_renamed_file_says_where_it_went(report, history):
    mod = by_name(report)["mod"]
    assert mod.state == drift.BROKEN
    assert mod.first_bad.id == history.commits["m4"]
    assert mod.last_good.id == history.commits["m3"]
    assert mod.file == "old/mod.py" and mod.hunk is None
    assert mod.moved_to == "new/mod.py" and not mod.deleted


def test_a_change_upstream_absorbed_is_obsolete(report, history):
    gamma = by_name(report)["gamma"]
    assert gamma.state == drift.OBSOLETE
    assert gamma.first_bad.id == history.commits["m5"]


def test_a_break_that_upstream_reverted_is_no_break(report, history):
    beta = by_name(report)["beta"]
    assert beta.ok and beta.breaks == 1
    assert beta.first_bad is None


def test_the_pin_and_the_merge_base_are_tried_too(report):
    assert {p.at_from for p in report.patches} == {drift.APPLIES}
    assert {p.at_base for p in report.patches} == {drift.APPLIES}
    assert [c.subject for c in report.release_commits] == []  # r1 touches no series file


def test_a_range_ending_before_the_breaks_is_clean(history):
    repo = gitcmd.open_repo(history.repo)
    report = drift.run_drift(repo, parsed_patches(history), "v1.0", history.commits["m2"])
    assert report.ok and report.commits == 2


def test_contains_change_needs_every_hunk_in_order():
    from rocmpatch.patching import parse_patch

    patch = parse_patch(
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n@@ -5,1 +5,1 @@\n-p\n+q\n",
        name="p", source="p",
    )
    assert drift.contains_change(patch, {"f": b"0\nx\nz\n1\n2\n3\nq\n"}.get)
    assert not drift.contains_change(patch, {"f": b"q\nx\nz\n"}.get)
