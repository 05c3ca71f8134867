"""3-way merges and scratch repositories (rebase)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import UpstreamError
from rocmpatch.gitcmd.core import Repo, _last_line, init_repo, run, run_status, tree_of


def objects_dir(repo: Repo) -> Path:
    """The object directory of repo (absolute), for another repository's alternates file."""
    return Path(run(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects"))


def init_borrowing_repo(path: Path, source: Repo) -> Repo:
    """A bare repository that reads source's objects (alternates) and writes its own: scratch
    work never adds anything to the source, and deleting `path` undoes all of it."""
    repo = init_repo(path, bare=True)
    alternates = Path(repo.git_dir) / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects_dir(source)}\n")
    return repo


@dataclass(frozen=True)
class MergeResult:
    tree: str  # with conflict markers in the conflicted files
    conflicts: tuple[str, ...]


def merge_commits(repo: Repo, ours: str, theirs: str) -> MergeResult:
    """3-way merge of two commits at their merge base, as `git merge` would (renames followed),
    without touching an index or a working tree (`git merge-tree --write-tree`)."""
    status, out, err = run_status(repo, "-c", "merge.conflictStyle=merge", "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs)
    if status not in (0, 1):
        raise UpstreamError(f"git merge-tree failed: {_last_line(err)}")
    lines = out.decode("utf-8", "surrogateescape").split("\n")
    conflicts = tuple(dict.fromkeys(line for line in lines[1:] if line))
    return MergeResult(lines[0].strip(), conflicts if status == 1 else ())


def add_worktree(repo: Repo, path: Path, commit: str, tree: str | None = None) -> None:
    """A working tree of `commit` at path; with `tree`, its files and index become that tree
    while HEAD stays at commit (so `git diff HEAD` there shows the change in progress)."""
    run(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    if tree is not None:
        run(path, "read-tree", "-m", "-u", tree_of(repo, commit), tree)
