from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from rocmpatch import gitcmd, target
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


# --- open_repo, run and object lookups: rocmpatch's own handle on a repository -------------------


def git(where: Path, *args: str) -> str:
    """git itself, outside rocmpatch, to build and inspect repositories."""
    return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True).stdout.strip()


def test_open_repo_work_tree(upstream):
    repo = gitcmd.open_repo(upstream.path)
    assert (repo.git_dir, repo.working_tree_dir, repo.bare) == (str(upstream.path / ".git"), str(upstream.path), False)
    assert gitcmd.head_commit(repo) == upstream.later
    assert gitcmd.run(repo, "rev-parse", "--show-toplevel") == str(upstream.path)


def test_open_repo_bare(upstream, tmp_path):
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(upstream.path), str(mirror))
    repo = gitcmd.open_repo(mirror)
    assert (repo.git_dir, repo.working_tree_dir, repo.bare) == (str(mirror), None, True)
    assert gitcmd.resolve_commit(repo, "v1.0") == upstream.commit
    with pytest.raises(TargetRefused, match="is a bare git repository"):
        target.open_target(mirror)


def test_open_repo_bare_without_config_runs_git_inside_it(upstream, tmp_path):
    """core.bare unset: git must not take the parent (here a checkout of its own) for its working tree."""
    parent = tmp_path / "parent"
    git(tmp_path, "init", "-q", str(parent))
    mirror = parent / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(upstream.path), str(mirror))
    (mirror / "config").unlink()
    repo = gitcmd.open_repo(mirror)
    assert (repo.git_dir, repo.working_tree_dir, repo.bare) == (str(mirror), None, True)
    assert gitcmd.run(repo, "rev-parse", "--absolute-git-dir") == str(mirror)
    assert gitcmd.tree_of(repo, upstream.commit) == upstream.tree


def test_open_repo_takes_no_directory_below_the_top(upstream):
    """As GitPython's Repo(path) did: the top of a checkout, or a git directory; nothing inside either."""
    for inside in (upstream.path / "pkg", upstream.path / ".git" / "refs"):
        with pytest.raises(TargetRefused) as refused:
            gitcmd.open_repo(inside)
        assert refused.value.message == f"{inside}: not a git repository"
    repo = gitcmd.open_repo(upstream.path / ".git")  # the git directory itself: no working tree
    assert (repo.git_dir, repo.working_tree_dir) == (str(upstream.path / ".git"), None)


def test_open_repo_through_a_symlink_keeps_the_path_given(upstream, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(upstream.path)
    repo = gitcmd.open_repo(link)
    assert (repo.git_dir, repo.working_tree_dir) == (str(link / ".git"), str(link))


@pytest.mark.parametrize("name", ["plain", "missing", "file"])
def test_open_repo_refuses_in_one_line(tmp_path, name):
    path = tmp_path / name
    if name == "plain":
        path.mkdir()
    elif name == "file":
        path.write_text("x\n")
    with pytest.raises(TargetRefused) as refused:
        gitcmd.open_repo(path)
    assert refused.value.message == f"{path}: not a git repository"
    assert refused.value.hint == "give a checkout made by 'rocmpatch apply'"  # what the path is: rocmpatch.target


def test_init_repo(tmp_path):
    repo = gitcmd.init_repo(tmp_path / "new")
    assert (repo.git_dir, repo.working_tree_dir) == (str(tmp_path / "new" / ".git"), str(tmp_path / "new"))
    bare = gitcmd.init_repo(tmp_path / "bare.git", bare=True)
    assert (bare.git_dir, bare.working_tree_dir) == (str(tmp_path / "bare.git"), None)
    for made in (repo, bare):
        opened = gitcmd.open_repo(Path(made.cwd))
        assert (opened.git_dir, opened.working_tree_dir, opened.objects_dir) == (made.git_dir, made.working_tree_dir, made.objects_dir)
        assert gitcmd.run(made, "symbolic-ref", "HEAD") == "refs/heads/main"


def test_run_bytes_with_stdin(upstream):
    repo = gitcmd.open_repo(upstream.path)
    data = b"a\0binary\r\nblob\xff"
    sha = gitcmd.run_bytes(repo, "hash-object", "-w", "--stdin", stdin=data).decode().strip()
    assert sha == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert gitcmd.read_blob(repo, sha) == data
    assert gitcmd.run_bytes(upstream.path, "cat-file", "blob", sha) == data  # a directory will do too


def test_failing_command_is_one_line(upstream):
    repo = gitcmd.open_repo(upstream.path)
    with pytest.raises(UpstreamError) as failed:
        gitcmd.run(repo, "rev-parse", "--verify", "no-such-ref")
    assert failed.value.message == "git rev-parse failed: fatal: Needed a single revision"
    with pytest.raises(UpstreamError) as failed:
        gitcmd.run(repo, "-c", "core.abbrev=12", "cat-file", "-t", "no-such-ref")
    assert failed.value.message == "git cat-file failed: fatal: Not a valid object name no-such-ref"


def test_resolve_commit(upstream):
    repo = gitcmd.open_repo(upstream.path)
    assert gitcmd.resolve_commit(repo, "v1.0") == upstream.commit
    assert gitcmd.resolve_commit(repo, upstream.commit[:10]) == upstream.commit
    assert gitcmd.resolve_commit(repo, "HEAD~1") == upstream.commit
    assert gitcmd.tree_of(repo, "v1.0") == upstream.tree
    for name in ("no-such-ref", upstream.tree, "", "HEAD\nv1.0", "HEAD^{nonsense}", "-h", "v1.0 HEAD"):
        assert gitcmd.resolve_commit(repo, name) is None, name


def test_ambiguous_names_resolve_to_nothing(upstream):
    repo = gitcmd.open_repo(upstream.path)
    by_prefix: dict[str, str] = {}
    for number in range(2000):  # some two of these share their first four hex digits
        sha = gitcmd.write_blob(repo, b"blob %d\n" % number)
        if sha[:4] in by_prefix:
            break
        by_prefix[sha[:4]] = sha
    else:
        pytest.fail("no two blobs share a prefix")
    assert repo.read_object(sha[:4]) is None
    assert repo.read_object(sha[:12])[0] == sha
    assert gitcmd.has_object(repo, sha) and not gitcmd.has_object(repo, "0" * 40) and not gitcmd.has_object(repo, "not hex")


def test_written_objects_are_what_git_writes(upstream):
    repo = gitcmd.open_repo(upstream.path)
    blob = gitcmd.write_blob(repo, b"new\n")
    assert blob == hashlib.sha1(b"blob 4\0new\n").hexdigest()
    assert git(upstream.path, "cat-file", "-p", blob) == "new"
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone(datetime.timedelta(hours=-7, minutes=-30)))
    identity = gitcmd.Identity("Some One", "one@example.com", when)
    message = "subject\n\nbody\n"
    commit = gitcmd.commit_tree(repo, upstream.tree, upstream.commit, message, identity)
    stamp = f"{int(when.timestamp())} -0730"
    env = {**os.environ, "GIT_AUTHOR_NAME": "Some One", "GIT_AUTHOR_EMAIL": "one@example.com", "GIT_AUTHOR_DATE": stamp,
           "GIT_COMMITTER_NAME": "Some One", "GIT_COMMITTER_EMAIL": "one@example.com", "GIT_COMMITTER_DATE": stamp}
    by_git = subprocess.run(["git", "commit-tree", upstream.tree, "-p", upstream.commit], cwd=upstream.path, env=env,
                            input=message, capture_output=True, text=True, check=True).stdout.strip()
    assert commit == by_git
    assert gitcmd.commit_date(repo, commit) == when and gitcmd.commit_date(repo, commit).utcoffset() == when.utcoffset()
    with_trailers = gitcmd.commit_tree(repo, upstream.tree, upstream.commit, message, identity, [("Key", "value"), ("Other", "x")])
    assert gitcmd.commit_links(repo, with_trailers) == ({"Key": "value", "Other": "x"}, [upstream.commit])
    git(upstream.path, "fsck", "--strict", "--no-dangling")


def test_close_ends_the_batch_process(upstream):
    repo = gitcmd.open_repo(upstream.path)
    assert gitcmd.resolve_commit(repo, "HEAD") == upstream.later
    process = repo._batch
    repo.close()
    assert process.poll() is not None and repo._batch is None
    assert gitcmd.resolve_commit(repo, "v1.0") == upstream.commit  # a later lookup starts another
    repo.close()
