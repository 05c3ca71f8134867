"""The working tree as rocmpatch hashes it itself, and its own stat cache: against real git
repositories in tmp dirs."""

from __future__ import annotations

import os
import subprocess

from rocmpatch import gitcmd, snapshot, statcache
from tests.fixtures import commit_all, write_files


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_tree_id_is_git_write_tree_for_awkward_names_modes_and_links(tmp_path):
    repo_path = tmp_path / "r"
    repo = gitcmd.init_repo(repo_path)
    names = {"a.b": "1", "a/x": "2", "a0": "3", "a-": "4", "deep/er/still/f.py": "5", "sp ace": "6", "new\nline": "7",
             "bytes-\udcff": "8", "tab\there": "9", "Z": "10", "ü.txt": "11"}
    for name, text in names.items():
        full = repo_path / os.fsencode(name).decode("utf-8", "surrogateescape")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    (repo_path / "a0").chmod(0o755)
    (repo_path / "link").symlink_to("a/x")
    (repo_path / "dangling").symlink_to("nowhere/at/all")
    (repo_path / "empty/dir").mkdir(parents=True)  # git records no empty directory
    commit_all(repo_path, "awkward")
    taken = snapshot.take(repo_path, gitcmd.list_tree(repo, "HEAD"), snapshot.ignored_by_git(repo))
    assert taken.tree == gitcmd.tree_of(repo, "HEAD")
    assert taken.links == {"link": "a/x", "dangling": "nowhere/at/all"}
    assert taken.hashed == len(names)


def test_untracked_ignored_and_nested_paths(tmp_path):
    repo_path = tmp_path / "r"
    repo = gitcmd.init_repo(repo_path)
    write_files(repo_path, {"pkg/a.py": "a\n", ".gitignore": "build/\n*.log\n"})
    commit_all(repo_path, "base")
    guide = gitcmd.list_tree(repo, "HEAD")
    write_files(repo_path, {"build/x/y.py": "y\n", "run.log": "log\n", "pkg/new.py": "n\n", "data/set.bin": "d",
                            "pkg/__pycache__/a.cpython-311.pyc": "pyc"})
    (repo_path / ".git/info/exclude").write_text("data/\n__pycache__/\n")  # the repository's own: hides nothing here
    gitcmd.init_repo(repo_path / "vendor/nested")
    taken = snapshot.take(repo_path, guide, snapshot.ignored_by_git(repo))
    assert {p: e.sha for p, e in taken.entries.items() if not e.sha} == {
        "pkg/new.py": "", "vendor/nested": "", "data/set.bin": "", "pkg/__pycache__/a.cpython-311.pyc": ""}
    assert taken.tree is None and taken.importable_ignored == []
    strict = snapshot.take(repo_path, guide, snapshot.ignored_by_git(repo), strict=True)
    assert sorted(strict.importable_ignored) == ["build/x/y.py"]


def test_a_gitignore_of_its_own_finding_hides_nothing(tmp_path):
    repo_path = tmp_path / "r"
    repo = gitcmd.init_repo(repo_path)
    write_files(repo_path, {"pkg/a.py": "a\n"})
    commit_all(repo_path, "base")
    write_files(repo_path, {"pkg/.gitignore": "*\n", "sneaky/.gitignore": "*\n"})
    taken = snapshot.take(repo_path, gitcmd.list_tree(repo, "HEAD"), snapshot.ignored_by_git(repo))
    assert {"pkg/.gitignore", "sneaky/.gitignore"} <= taken.entries.keys()


def test_stat_cache_spares_reading_unchanged_files_and_never_hides_a_change(tmp_path, monkeypatch):
    repo_path = tmp_path / "r"
    repo = gitcmd.init_repo(repo_path)
    write_files(repo_path, {f"pkg/m{i}.py": f"x = {i}\n" for i in range(20)})
    commit_all(repo_path, "base")
    tree = gitcmd.tree_of(repo, "HEAD")
    first = statcache.refresh(repo, tree)
    assert first.tree == tree and first.hashed == 20
    cache = statcache.load(repo_path)
    racy = sum(1 for recorded in cache.files.values() if recorded[0] is None)
    again = snapshot.take(repo_path, cache.files, snapshot.ignored_by_git(repo), cached=cache)
    assert again.tree == tree and again.hashed == racy  # only racily clean files are read again
    # Same size, mtime put back: the ctime moved, so the file is read again.
    target = repo_path / "pkg/m3.py"
    before = os.stat(target)
    target.write_text("x = 9\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    changed = snapshot.take(repo_path, cache.files, snapshot.ignored_by_git(repo), cached=cache)
    assert changed.tree != tree and changed.entries["pkg/m3.py"].sha == gitcmd.blob_id(b"x = 9\n")


def test_a_stat_cache_others_may_write_is_not_used(tmp_path, capsys):
    repo_path = tmp_path / "r"
    repo = gitcmd.init_repo(repo_path)
    write_files(repo_path, {"a.py": "a\n"})
    commit_all(repo_path, "base")
    statcache.refresh(repo, gitcmd.tree_of(repo, "HEAD"))
    path = statcache.path_for(repo_path)
    path.chmod(0o666)
    assert statcache.load(repo_path) is None
    assert "writable by others" in capsys.readouterr().err
