from __future__ import annotations

import pytest

from rocmpatch import gitcmd
from rocmpatch.errors import TargetRefused, UpstreamError


@pytest.mark.parametrize("url", ["ext::sh -c evil", "fd::3", "-u evil", "--upload-pack=evil", "", "foo://host/x"])
def test_check_url_refuses(url):
    with pytest.raises(UpstreamError):
        gitcmd.check_url(url)


@pytest.mark.parametrize("url", ["https://github.com/NVIDIA/Megatron-LM.git", "file:///srv/mirror", "/srv/mirror", "git@github.com:NVIDIA/Megatron-LM.git"])
def test_check_url_accepts(url):
    assert gitcmd.check_url(url) == url


def test_open_repo_refuses_non_repo(tmp_path):
    with pytest.raises(TargetRefused, match="not a git repository"):
        gitcmd.open_repo(tmp_path)


def test_write_tree_leaves_index_and_worktree_alone(upstream):
    repo = gitcmd.open_repo(upstream.path)
    index_before = (upstream.path / ".git/index").read_bytes()
    tree = gitcmd.write_tree(repo, upstream.tree, {"pkg/a.py": b"new\n", "README.md": None})
    entries = gitcmd.list_tree(repo, tree)
    assert "README.md" not in entries and gitcmd.read_blob(repo, entries["pkg/a.py"].sha) == b"new\n"
    assert (upstream.path / ".git/index").read_bytes() == index_before
    assert gitcmd.dirty_paths(repo) == []


def test_symlink_on_path(upstream):
    reader = gitcmd.TreeReader(gitcmd.open_repo(upstream.path), upstream.commit)
    assert reader.symlink_on_path("alias/a.py") == "alias"
    assert reader.symlink_on_path("pkg/a.py") is None


def test_worktree_snapshot_and_dirty_paths(upstream):
    repo = gitcmd.open_repo(upstream.path)
    (upstream.path / "pkg/a.py").write_text("edited\n")
    (upstream.path / "untracked.txt").write_text("u\n")
    assert sorted(p for _, p in gitcmd.dirty_paths(repo)) == ["pkg/a.py", "untracked.txt"]
    snapshot = gitcmd.list_tree(repo, gitcmd.worktree_tree(repo))
    assert "untracked.txt" in snapshot
    assert gitcmd.hash_files(repo, ["pkg/a.py", "gone"]) == {"pkg/a.py": snapshot["pkg/a.py"].sha, "gone": None}


def test_copy_objects_gives_a_shallow_cache_to_a_new_repository(upstream, tmp_path):
    """Loose objects and packs, and the shallow list: what `git clone --local` would copy."""
    from rocmpatch import store
    from tests.test_store import pin

    cache = store.cached_repo(pin(upstream))  # one pack from the shallow fetch
    loose_tree = gitcmd.write_tree(cache, upstream.tree, {"pkg/new.py": b"loose\n"})
    new = gitcmd.init_repo(tmp_path / "new")
    gitcmd.copy_objects(cache, new)
    gitcmd.copy_objects(cache, new)  # again: the same files are there already
    assert gitcmd.tree_of(new, upstream.commit) == upstream.tree
    assert gitcmd.list_tree(new, loose_tree)["pkg/new.py"].sha
    assert (tmp_path / "new/.git/shallow").read_text().split() == [upstream.commit]
    gitcmd.run(new, "fsck", "--connectivity-only", "--no-dangling", upstream.commit)
