from __future__ import annotations

import pytest

from rocmpatch import gitcmd
from rocmpatch.operations import rebase_report
from rocmpatch.operations.rebase_conflicts import CONTENT, DELETED_UPSTREAM
from rocmpatch.operations.rebase_report import CONFLICT, EXACT, THREE_WAY
from tests.test_rebase import RELEASE, deleting_branch, loaded, series
from tests.upstream_history import commit_files, git, lines, make_history, replace_line


@pytest.fixture
def history(tmp_path):
    return make_history(tmp_path)


def report(history, onto, patches=None):
    repo = gitcmd.open_repo(history.repo)
    return rebase_report.report(repo, RELEASE, history.pin, gitcmd.resolve_commit(repo, onto), onto, patches or series(history))


def outcomes(found):
    return [(p.name, p.result, [(c.path, c.kind) for c in p.conflicts]) for p in found.patches]


def files_of(repo):
    return {p: p.read_bytes() for p in sorted((repo / ".git").rglob("*")) if p.is_file()}


def test_every_patch_is_tried_without_stopping(history):
    before = files_of(history.repo)
    found = report(history, "main")
    assert outcomes(found) == [
        ("alpha", CONFLICT, [("a.py", CONTENT)]),  # upstream changed the line next to alpha's
        ("mod", THREE_WAY, []),  # follows old/mod.py to new/mod.py
        ("gamma", THREE_WAY, []),  # upstream took it
        ("beta", EXACT, []),
    ]
    assert [p.upstream_has_it for p in found.patches] == [False, False, True, False]
    assert found.totals == {"exact": 1, "3-way": 2, "conflict": 1}
    assert found.onto == history.commits["m7"] and found.onto_ref == "main" and found.pin == history.pin
    assert files_of(history.repo) == before  # the upstream is only read; the scratch repository is gone


def test_before_any_break_every_patch_is_exact(history):
    assert report(history, history.commits["m2"]).totals == {"exact": 4, "3-way": 0, "conflict": 0}


def test_a_file_upstream_deleted_is_a_conflict_of_its_kind(history):
    onto = deleting_branch(history, "drop-b", history.commits["m2"], "b.py")
    assert outcomes(report(history, onto))[-1] == ("beta", CONFLICT, [("b.py", DELETED_UPSTREAM)])


def test_after_a_conflict_the_patch_s_clean_files_are_carried(history):
    """one conflicts in a.py but merges c.py cleanly; two changes the line after one's in c.py,
    so it applies exactly only on a tree that kept one's c.py."""
    a = lines("a")
    c = lines("c")
    git(history.repo, "checkout", "-q", "-b", "custom", history.pin)
    texts = {}
    one_c = replace_line(c, 10, "c line 10 one")
    commit_files(history.repo, "one", {"a.py": replace_line(a, 6, "a line 6 one"), "c.py": one_c})
    texts["one"] = gitcmd.format_patch(history.repo, "HEAD")
    commit_files(history.repo, "two", {"c.py": replace_line(one_c, 11, "c line 11 two")})
    texts["two"] = gitcmd.format_patch(history.repo, "HEAD")
    git(history.repo, "checkout", "-q", "release")
    patches = [loaded(name, f"{n:04d}-{name}.patch", text) for n, (name, text) in enumerate(texts.items(), 1)]
    found = report(history, "main", patches)
    assert outcomes(found) == [("one", CONFLICT, [("a.py", CONTENT)]), ("two", EXACT, [])]
    assert found.patches[0].carried == ["c.py"]


def test_json_shape(history):
    data = report(history, "main").to_json()
    assert set(data) == {"release", "pin", "onto_ref", "onto", "totals", "seconds", "patches"}
    assert data["patches"][0] == {"name": "alpha", "layer": "release", "result": "conflict", "upstream_has_it": False,
                                  "conflicts": [{"path": "a.py", "kind": CONTENT}], "carried": []}
