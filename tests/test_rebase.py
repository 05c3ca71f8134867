from __future__ import annotations

from pathlib import Path

import pytest

from rocmpatch import gitcmd, patch_header
from rocmpatch.operations import rebase, rebase_state
from rocmpatch.errors import InvalidInput, TargetRefused
from rocmpatch.patching import parse_patch
from testkit.trees import apply_series
from rocmpatch.schema import SeriesEntry
from rocmpatch.series import loaded_patch
from rocmpatch.operations.rebase_conflicts import CONTENT, DELETED_UPSTREAM, Conflict
from tests.upstream_history import commit_files, git, make_history


@pytest.fixture
def history(tmp_path):
    return make_history(tmp_path)


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "project"
    path.mkdir()
    gitcmd.run(path, "init", "-q")
    return path


RELEASE = "test_v1"


def series(history):
    return [loaded(name, f"{n:04d}-{name}.patch", text) for n, (name, text) in enumerate(history.patch_texts.items(), 1)]


def loaded(name, file, text):
    entry = SeriesEntry(name, file, f"summary of {name}", f"What {name} does.\n", f"Why {name}.\n", "tests", "rocmpatch", "no", "2026-11-23")
    return loaded_patch(entry, text.encode("utf-8", "surrogateescape"), Path(file))


def start(history, project, onto="main"):
    repo = gitcmd.open_repo(history.repo)
    return rebase.start(project, RELEASE, repo, history.pin, gitcmd.resolve_commit(repo, onto), onto, series(history))


def resolve_alpha(worktree):
    """Keep both sides: upstream's line 6 and our line 5."""
    text = (worktree / "a.py").read_text()
    assert "<<<<<<< " in text
    lines = [f"a line {n}\n" for n in range(1, 22)]
    lines[4] = "a line 5 patched for rocm\n"
    lines[5] = "a line 6 changed upstream\n"
    (worktree / "a.py").write_text("".join(lines))


def test_clean_rebase_before_any_break(history, project):
    done = start(history, project, onto=history.commits["m2"])
    assert isinstance(done, rebase.Finished)
    assert [o.result for o in done.outcomes] == [rebase.CLEAN] * 4


def test_stops_on_a_real_conflict_then_continue_carries_the_rename(history, project):
    stopped = start(history, project)
    assert isinstance(stopped, rebase.Stopped)
    assert stopped.patch == "alpha" and stopped.files == ["a.py"]
    assert rebase_state.in_progress(project, [RELEASE])
    # The markers must go before --continue takes the files.
    with pytest.raises(InvalidInput, match="conflict marker"):
        rebase.resume(project, RELEASE, series(history))
    resolve_alpha(stopped.worktree)
    done = rebase.resume(project, RELEASE, series(history))
    assert isinstance(done, rebase.Finished)
    assert [(o.name, o.result) for o in done.outcomes] == [
        ("alpha", rebase.RESOLVED), ("mod", rebase.MERGED), ("gamma", rebase.OBSOLETE), ("beta", rebase.CLEAN),
    ]
    assert done.texts["gamma"] is None
    assert "+++ b/new/mod.py" in done.texts["mod"] and "a/old/mod.py" not in done.texts["mod"]
    assert done.texts["alpha"].startswith("From 0000000000000000000000000000000000000000 ")
    # The header is what `lock` writes from the series.yaml entry, not the old one ("alpha: patch a.py").
    entry = next(p.entry for p in series(history) if p.name == "alpha")
    assert done.texts["alpha"].startswith(patch_header.render(entry))
    assert "Subject: [PATCH] alpha: summary of alpha\n\nWhat alpha does.\n\nWhy: Why alpha.\n---\n" in done.texts["alpha"]
    assert "patch a.py" not in done.texts["alpha"]
    # The refreshed series applies exactly on the new upstream and gives the rebased tree.
    repo = gitcmd.open_repo(history.repo)
    patches = [parse_patch(t, name=n, source=n) for n, t in done.texts.items() if t]
    onto_tree = gitcmd.tree_of(repo, done.onto)
    tree = gitcmd.write_tree(repo, onto_tree, apply_series(patches, gitcmd.TreeReader(repo, onto_tree).read))
    assert tree == done.tree


def test_abort_leaves_nothing(history, project):
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    stopped = start(history, project)
    assert stopped.worktree.is_dir()
    rebase.abort(project, RELEASE)
    assert not rebase_state.in_progress(project, [RELEASE])
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before
    with pytest.raises(TargetRefused):
        rebase.abort(project, RELEASE)


def test_the_state_keeps_any_path_and_reads_back_as_written(project):
    """state.json is JSON: a conflicted path with a line break, non-UTF-8 bytes or an emoji comes back as it was."""
    odd = ["a\nb.py", "bad\udcff.py", "emoji-\U0001f600.py"]
    state = rebase_state.State("c" * 40, "main", "", None, "/objects", {"0001-a.patch": "d" * 64}, ["e" * 40], "f" * 40,
                               [None], [rebase_state.Outcome("a", rebase.CONFLICT, odd)], conflicts=[Conflict(odd[1], CONTENT, None)])
    directory = rebase_state.state_dir(project, RELEASE)
    directory.mkdir(parents=True)
    rebase_state.save(directory, state)
    assert rebase_state.load(project, RELEASE) == (directory, state)
    assert rebase_state.in_progress(project, [RELEASE, "other"]) == [RELEASE]


def test_a_second_rebase_waits_for_the_first(history, project):
    start(history, project)
    with pytest.raises(Exception, match="already in progress"):
        start(history, project)


def test_continue_refuses_a_series_edited_meanwhile(history, project):
    start(history, project)
    edited = series(history)
    edited[1] = loaded(edited[1].name, edited[1].entry.file, edited[1].text.replace("\n---\n", "\nedited meanwhile\n---\n", 1))
    with pytest.raises(TargetRefused, match="series changed"):
        rebase.resume(project, RELEASE, edited)


def test_an_unchanged_patch_keeps_its_file_byte_for_byte(history, project):
    done = start(history, project, onto=history.commits["m1"])
    assert done.texts == dict(history.patch_texts)


def deleting_branch(history, name, start, path):
    """A branch of upstream from `start` that deletes `path` (the repository stays on its branch)."""
    head = git(history.repo, "rev-parse", "--abbrev-ref", "HEAD")
    git(history.repo, "checkout", "-q", "-b", name, start)
    commit = commit_files(history.repo, f"delete {path}", {path: None})
    git(history.repo, "checkout", "-q", head)
    return commit


@pytest.mark.parametrize("resolution", ["git rm", "git add", "edit"])
def test_continue_refuses_a_file_deleted_upstream_until_resolved(history, project, resolution):
    """beta changes b.py, which upstream deleted: git leaves the patch's whole b.py, no marker."""
    onto = deleting_branch(history, "drop-b", history.commits["m2"], "b.py")
    stopped = start(history, project, onto=onto)
    assert stopped.patch == "beta" and [(c.path, c.kind) for c in stopped.conflicts] == [("b.py", DELETED_UPSTREAM)]
    left = (stopped.worktree / "b.py").read_text()
    assert "b line 12 patched for rocm" in left and "<<<<<<<" not in left
    assert gitcmd.unmerged_paths(stopped.worktree) == {"b.py"}  # as `git merge` leaves it: `git status` says so
    with pytest.raises(InvalidInput, match=r"patch beta is not resolved: b\.py \(deleted upstream") as refused:
        rebase.resume(project, RELEASE, series(history))
    assert "git rm FILE" in refused.value.hint and "git add FILE" in refused.value.hint
    assert rebase_state.in_progress(project, [RELEASE])  # still stopped, nothing taken
    if resolution == "edit":
        (stopped.worktree / "b.py").write_text(left.replace("b line 1\n", "b line 1 kept, ported by hand\n"))
    else:
        git(stopped.worktree, resolution.split()[1], "b.py")
    done = rebase.resume(project, RELEASE, series(history))
    assert isinstance(done, rebase.Finished)
    if resolution == "git rm":
        assert done.outcomes[-1].result == rebase.OBSOLETE and done.texts["beta"] is None
    else:
        assert done.outcomes[-1].result == rebase.RESOLVED and "new file mode" in done.texts["beta"]
        assert ("ported by hand" in done.texts["beta"]) == (resolution == "edit")


def test_continue_refuses_a_marker_left_even_when_git_added(history, project):
    stopped = start(history, project)
    assert [(c.path, c.kind) for c in stopped.conflicts] == [("a.py", CONTENT)]
    git(stopped.worktree, "add", "a.py")
    with pytest.raises(InvalidInput, match=r"a\.py:\d+ \(conflict marker\)"):
        rebase.resume(project, RELEASE, series(history))
