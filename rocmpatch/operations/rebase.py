"""Carry the series to a newer upstream commit, one patch at a time, as `git am -3` does.

For patch i, ORIG(i-1) is the pin with patches 1..i-1 applied as they are, and NEW(i-1) is the new
upstream commit with the rebased patches 1..i-1. Patch i is first applied exactly to NEW(i-1)
("clean"); failing that, it is merged 3-way: base ORIG(i-1), ours NEW(i-1), theirs ORIG(i-1) + patch i,
with git's rename detection, so a patch follows a file upstream moved ("merged"). A merge that
changes nothing means upstream already has the patch ("obsolete", dropped). A merge with conflicts
stops the rebase ("conflict"):

* all work lives in a state directory per release (`.git/rocmpatch-rebase-<release>/` of the
  project, or `.rocmpatch-rebase-<release>/` outside git), so rebases of two releases can be in
  progress at once: a scratch bare repository that borrows the upstream's objects, a worktree
  holding the merge (conflicted paths unmerged in its index, as `git merge` leaves them), and
  state.json (rebase_state), which records each conflicted path and what the stop left there;
* `--continue` takes the worktree's files as patch i and goes on, once every conflicted path is
  resolved (rebase_conflicts); `--abort` deletes the directory.

`rebase --report` (rebase_report) takes the same steps (`attempt`) without stopping, and writes nothing.

The rewritten patch files take their message from the series.yaml entries (the one source of a
patch's name, summary, description and why), their author and date from the patch files.

Each patch goes through the same applier as apply and check (rocmpatch.trees.SeriesApplier: the
same path, mode and symlink safety). The series files and upstream.lock are written only when
every patch is through, so a stopped or aborted rebase has changed nothing of the project.

With an overlay (`--overlay DIR`), its patches follow the release's in the same chain, so each is
carried onto the rebased release series; when all are through, DIR's patch files and overlay.lock
are rewritten too (for the release written: --into's, or the release itself).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd, patch_header
from rocmpatch.errors import Busy, CheckFailed, PatchConflict, TargetRefused
from rocmpatch.gitcmd import Identity
from rocmpatch.operations.rebase_conflicts import OTHER, Conflict, conflicts_of, refuse_unresolved
from rocmpatch.operations.rebase_state import Outcome, State, load, not_started, save, state_dir
from rocmpatch.schema import SeriesEntry
from rocmpatch.series import OVERLAY, LoadedPatch
from rocmpatch.trees import SeriesApplier

CLEAN, MERGED, CONFLICT, RESOLVED, OBSOLETE = "applied clean", "merged", "conflict", "resolved", "dropped as obsolete"


@dataclass
class Finished:
    """A rebase that went through: the refreshed patch texts (None: dropped) and the final tree."""

    onto: str
    onto_ref: str
    url: str
    into: str | None
    texts: dict[str, str | None]
    tree: str
    outcomes: list[Outcome]


@dataclass
class Stopped:
    patch: str
    files: list[str]
    worktree: Path
    outcomes: list[Outcome]
    conflicts: list[Conflict]


def start(project: Path, release: str, source: gitcmd.Repo, pin: str, onto: str, onto_ref: str, patches: list[LoadedPatch],
          *, url: str = "", into: str | None = None, overlay: Path | None = None) -> Finished | Stopped:
    directory = state_dir(project, release)
    if directory.exists():
        raise Busy(f"a rebase of {release} is already in progress ({directory})",
                   hint=f"run 'rocmpatch rebase --release {release} --continue' or '--abort'")
    directory.mkdir(parents=True)
    try:
        work = gitcmd.init_borrowing_repo(directory / "objects.git", source)
        originals = original_chain(work, pin, patches)
        state = State(onto, onto_ref, url, into, str(gitcmd.objects_dir(source)), _sha256s(patches), originals, onto,
                      overlay=str(overlay) if overlay is not None else None)
        return _carry(directory, work, state, patches)
    except BaseException:
        if not (directory / "state.json").is_file():
            shutil.rmtree(directory, ignore_errors=True)  # nothing worth keeping: as if never started
        raise


def resume(project: Path, release: str, patches: list[LoadedPatch]) -> Finished | Stopped:
    directory, state = load(project, release)
    if _sha256s(patches) != state.series_sha256:
        raise TargetRefused("the series changed while the rebase was stopped", hint="restore the patch files, or run 'rocmpatch rebase --abort'")
    work = gitcmd.open_repo(directory / "objects.git")
    worktree = directory / "worktree"
    current = state.outcomes[-1]
    # A state.json from before conflicts were recorded: its markers are all there is to check.
    refuse_unresolved(worktree, current.name, state.conflicts or [Conflict(path, OTHER) for path in current.files])
    tree = gitcmd.worktree_tree(gitcmd.open_repo(worktree))
    _remove_worktree(work, worktree)
    current.result = RESOLVED
    state.conflicts = []
    _record(work, state, patches[state.done], tree)
    return _carry(directory, work, state, patches)


def abort(project: Path, release: str) -> Path:
    directory = state_dir(project, release)
    if not directory.exists():
        raise not_started()
    shutil.rmtree(directory)
    return directory


def finish(project: Path, release: str) -> None:
    """Forget a rebase whose results were written."""
    shutil.rmtree(state_dir(project, release), ignore_errors=True)


def _applied(work: gitcmd.Repo, tree: str, item: LoadedPatch) -> str:
    """The tree after applying one patch exactly, through the one applier every command uses."""
    applier = SeriesApplier(work, tree)
    applier.apply(item)
    return applier.tree()


def original_chain(work: gitcmd.Repo, pin: str, patches: list[LoadedPatch]) -> list[str]:
    """ORIG(1..n): the series as it is, applied exactly on the pin, one commit per patch."""
    chain, parent = [], pin
    for item in patches:
        try:
            tree = _applied(work, gitcmd.tree_of(work, parent), item)
        except PatchConflict as conflict:
            raise CheckFailed(f"the series does not apply at the pin: {conflict}", hint="run 'rocmpatch check' and fix the series first") from None
        parent = _commit(work, tree, parent, item)
        chain.append(parent)
    return chain


@dataclass(frozen=True)
class Attempt:
    result: str  # CLEAN, MERGED, OBSOLETE or CONFLICT
    tree: str  # the tree the patch gives; at a CONFLICT, with markers in the conflicted files
    merge: gitcmd.MergeResult | None = None  # at a CONFLICT: the merge, its conflicted paths


def attempt(work: gitcmd.Repo, tip_tree: str, base: str, original: str, item: LoadedPatch) -> Attempt:
    """Patch i onto NEW(i-1) (`tip_tree`): exactly, else merged 3-way, as `git am -3` does: ours is
    NEW(i-1) and theirs ORIG(i) (`original`), both children of ORIG(i-1) (`base`), their merge base.
    Synthetic commits in the scratch repository only."""
    try:
        return Attempt(CLEAN, _applied(work, tip_tree, item))
    except PatchConflict:
        pass
    ours = _commit_with(work, tip_tree, base, "rebased series so far")
    # Named refs, because merge-tree labels the conflict markers with the names it is given.
    gitcmd.update_ref(work, "refs/heads/upstream", ours)
    gitcmd.update_ref(work, f"refs/heads/patch/{item.name}", original)
    merged = gitcmd.merge_commits(work, "upstream", f"patch/{item.name}")
    if merged.conflicts:
        return Attempt(CONFLICT, merged.tree, merged)
    return Attempt(OBSOLETE if merged.tree == tip_tree else MERGED, merged.tree)


def _carry(directory: Path, work: gitcmd.Repo, state: State, patches: list[LoadedPatch]) -> Finished | Stopped:
    while state.done < len(patches):
        item = patches[state.done]
        base = state.originals[state.done - 1] if state.done else _parent(work, state.originals[0])
        tried = attempt(work, gitcmd.tree_of(work, state.tip), base, state.originals[state.done], item)
        if tried.merge is None:
            state.outcomes.append(Outcome(item.name, tried.result))
            _record(work, state, item, tried.tree)
            continue
        state.outcomes.append(Outcome(item.name, CONFLICT, list(tried.merge.conflicts)))
        state.conflicts = conflicts_of(work, tried.merge)
        worktree = directory / "worktree"
        gitcmd.add_worktree(work, worktree, state.tip, tried.tree, tried.merge)
        save(directory, state)
        return Stopped(item.name, list(tried.merge.conflicts), worktree, state.outcomes, state.conflicts)
    texts: dict[str, str | None] = {}
    for item, commit in zip(patches, state.rebased):
        texts[item.name] = _refreshed(item, gitcmd.format_patch(work, commit)) if commit else None
    return Finished(state.onto, state.onto_ref, state.url, state.into, texts, gitcmd.tree_of(work, state.tip), state.outcomes)


def _refreshed(item: LoadedPatch, new: str) -> str:
    """The old text byte for byte when the diff itself did not change; else the new diff under the
    header `lock` writes from the patch's series.yaml entry (the entry is the one source of its words)."""
    if _diff_part(item.text) == _diff_part(new):
        return item.text
    return patch_header.with_header(item.entry, new)


def _diff_part(text: str) -> str:
    start = text.find("\ndiff --git ")
    return text[start:] if start >= 0 else text


def _record(work: gitcmd.Repo, state: State, item: LoadedPatch, tree: str) -> None:
    if tree == gitcmd.tree_of(work, state.tip):
        state.rebased.append(None)  # nothing left of the patch: upstream has it
        state.outcomes[-1].result = OBSOLETE
        return
    state.tip = _commit(work, tree, state.tip, item)
    state.rebased.append(state.tip)


def _commit(work: gitcmd.Repo, tree: str, parent: str, item: LoadedPatch) -> str:
    """A commit with the patch's own author and date and its entry's words, so format-patch writes them."""
    info = gitcmd.mail_info(work, item.text)
    return gitcmd.commit_tree(work, tree, parent, entry_message(item.entry), Identity(info.author, info.email, info.date))


def entry_message(entry: SeriesEntry) -> str:
    """A patch file's message from its series.yaml entry: "<name>: <summary>", the description, "Why: <why>"."""
    parts = [f"{entry.name}: {entry.summary.strip()}", entry.description.strip(), f"Why: {entry.why.strip()}" if entry.why.strip() else ""]
    return "\n\n".join(part for part in parts if part) + "\n"


def _commit_with(work: gitcmd.Repo, tree: str, parent: str, message: str) -> str:
    identity = Identity("rocmpatch", "rocmpatch@localhost", gitcmd.commit_date(work, parent))
    return gitcmd.commit_tree(work, tree, parent, message, identity)


def _parent(work: gitcmd.Repo, commit: str) -> str:
    parent = gitcmd.commit_info(work, commit).parent
    assert parent is not None
    return parent


def _sha256s(patches: list[LoadedPatch]) -> dict[str, str]:
    return {(f"overlay/{p.entry.file}" if p.layer == OVERLAY else p.entry.file): p.sha256 for p in patches}


def _remove_worktree(work: gitcmd.Repo, worktree: Path) -> None:
    shutil.rmtree(worktree)
    gitcmd.run(work, "worktree", "prune")
