"""3-way merges and scratch repositories (rebase)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch.errors import UpstreamError
from rocmpatch.gitcmd.core import Repo, _last_line, init_repo, run, run_bytes, run_status, tree_of


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
    stages: dict[str, tuple[tuple[int, str, str], ...]] = field(default_factory=dict)  # path -> its (stage, mode, blob)s

    def stages_of(self, path: str) -> frozenset[int]:
        """Which of the index stages git left for a conflicted path: 1 the base, 2 ours, 3 theirs."""
        return frozenset(stage for stage, _, _ in self.stages.get(path, ()))


def merge_commits(repo: Repo, ours: str, theirs: str) -> MergeResult:
    """3-way merge of two commits at their merge base, as `git merge` would (renames followed),
    without touching an index or a working tree (`git merge-tree --write-tree`). A conflicted path
    keeps the index stages git gives it, so a worktree can hold the conflict as `git merge` leaves it."""
    status, out, err = run_status(repo, "-c", "merge.conflictStyle=merge", "merge-tree", "--write-tree", "-z", "--no-messages", ours, theirs)
    if status not in (0, 1):
        raise UpstreamError(f"git merge-tree failed: {_last_line(err)}")
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    stages: dict[str, list[tuple[int, str, str]]] = {}
    for field_ in fields[1:]:  # "<mode> <blob> <stage>\t<path>" per conflicted entry, then an empty field
        if not field_:
            break
        info, _, path = field_.partition("\t")
        mode, blob, stage = info.split(" ")
        stages.setdefault(path, []).append((int(stage), mode, blob))
    if status == 0:
        return MergeResult(fields[0].strip(), ())
    return MergeResult(fields[0].strip(), tuple(stages), {path: tuple(entries) for path, entries in stages.items()})


def add_worktree(repo: Repo, path: Path, commit: str, tree: str | None = None, conflicts: MergeResult | None = None) -> None:
    """A working tree of `commit` at path; with `tree`, its files and index become that tree
    while HEAD stays at commit (so `git diff HEAD` there shows the change in progress). With
    `conflicts` (the merge that gave `tree`), its conflicted paths are unmerged in that index, as
    `git merge` leaves them: `git status` there names each, `git add` / `git rm` resolves it."""
    run(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    if tree is not None:
        run(path, "read-tree", "-m", "-u", tree_of(repo, commit), tree)
    if conflicts is not None and conflicts.stages:
        lines = []
        for conflicted, entries in conflicts.stages.items():
            lines.append(f"0 {'0' * 40}\t{conflicted}")  # out of stage 0 first, as update-index asks
            lines += [f"{mode} {blob} {stage}\t{conflicted}" for stage, mode, blob in entries]
        run(path, "update-index", "-z", "--index-info", stdin="".join(line + "\0" for line in lines).encode("utf-8", "surrogateescape"))


def unmerged_paths(worktree: Path) -> set[str]:
    """The paths a worktree's index still holds as unmerged (not yet `git add`ed or `git rm`ed)."""
    out = run_bytes(worktree, "ls-files", "-u", "-z").decode("utf-8", "surrogateescape")
    return {entry.partition("\t")[2] for entry in out.split("\0") if entry}
