"""Working trees: status, moving between trees, snapshots."""

from __future__ import annotations

import tempfile
from pathlib import Path

import git

from rocmpatch.gitcmd.core import resolve_commit, run, run_bytes


def head_commit(repo: git.Repo) -> str | None:
    return resolve_commit(repo, "HEAD")


def git_dir(repo: git.Repo) -> Path:
    return Path(repo.git_dir)


def dirty_paths(repo: git.Repo) -> list[tuple[str, str]]:
    """(status, path) for every path whose working tree or index differs from HEAD, untracked
    files included (ignored files are not)."""
    out = run_bytes(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=none")
    found = []
    for record in out.split(b"\0"):
        if record:
            text = record.decode("utf-8", "surrogateescape")
            found.append((text[:2], text[3:]))
    return found


def move_tree(repo: git.Repo, old_tree: str, new_tree: str) -> None:
    """Update index and working tree from old_tree to new_tree, touching only files that differ.

    Two-tree `read-tree -m -u` refuses (changing nothing) when a file it must change has local edits.
    """
    run(repo, "read-tree", "-m", "-u", old_tree, new_tree)


def force_tree(repo: git.Repo, tree: str) -> None:
    """Make index and working tree exactly `tree`, overwriting local changes (used only after
    the caller checked that nothing of the user's would be lost)."""
    run(repo, "read-tree", "--reset", "-u", tree)


def update_ref(repo: git.Repo, ref: str, new: str, old: str | None = None, *, message: str = "rocmpatch") -> None:
    """Point ref at new; with old, only if it still points at old (compare-and-swap)."""
    run(repo, "update-ref", "-m", message, ref, new, *([old] if old else []))


def hash_files(repo: git.Repo, paths: list[str]) -> dict[str, str | None]:
    """Blob ids of working-tree files as git would store them; None for a missing file."""
    root = Path(repo.working_tree_dir)
    present = [p for p in paths if (root / p).is_file() or (root / p).is_symlink()]
    result: dict[str, str | None] = {p: None for p in paths}
    # --stdin-paths is newline-separated and has no -z form: a name holding a newline (any other
    # byte is fine) is hashed on its own command line.
    listed = [p for p in present if "\n" not in p]
    if listed:
        out = run(repo, "hash-object", "--stdin-paths", stdin="".join(p + "\n" for p in listed).encode("utf-8", "surrogateescape"))
        result.update(zip(listed, out.split("\n")))
    for path in present:
        if "\n" in path:
            result[path] = run(repo, "hash-object", "--", path)
    return result


def changed_paths(repo: git.Repo, old_tree: str, new_tree: str) -> list[str]:
    out = run_bytes(repo, "diff-tree", "-r", "-z", "--no-renames", "--name-only", old_tree, new_tree)
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def worktree_tree(repo: git.Repo) -> str:
    """A tree id of the working tree as it is (untracked files included, ignored ones not),
    built in a temporary index so the repository's own index is left alone."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_bytes(repo, "read-tree", "HEAD", env=env)
        run_bytes(repo, "add", "-A", "--", ".", env=env)
        return run_bytes(repo, "write-tree", env=env).decode().strip()


def diff_trees(repo: git.Repo, old_tree: str, new_tree: str) -> bytes:
    """A patch from old_tree to new_tree that `git apply` takes back (binary-safe, full ids)."""
    return run_bytes(repo, "diff", "--binary", "--full-index", "--no-renames", old_tree, new_tree)
