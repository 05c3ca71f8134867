"""`rocmpatch status`: where each patch of the series stands in a target."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, history, target
from rocmpatch.errors import RocmpatchError
from rocmpatch.series import OVERLAY, LoadedSeries
from rocmpatch.trees import SeriesApplier

APPLIED, NOT_APPLIED, CONFLICTING = "applied", "not-applied", "conflicting"


@dataclass
class PatchState:
    name: str
    file: str
    summary: str
    state: str  # applied | not-applied | conflicting
    files: list[str]
    reason: str | None = None
    layer: str = "release"  # release | overlay


@dataclass
class StatusReport:
    target: Path
    pin: str
    head: str | None
    base: str | None
    uncommitted: list[str]
    interrupted: str | None
    patches: list[PatchState] = field(default_factory=list)
    user_commits: list[str] = field(default_factory=list)  # the user's own commits on top, newest first
    foreign_overlay: list[str] = field(default_factory=list)  # overlay patches applied beyond the stack asked about

    @property
    def at_pin(self) -> bool:
        return self.base == self.pin

    def to_json(self) -> dict:
        return {
            "target": str(self.target), "pin": self.pin, "head": self.head, "base": self.base,
            "at_pin": self.at_pin, "interrupted": self.interrupted, "uncommitted": self.uncommitted,
            "user_commits": self.user_commits, "foreign_overlay": self.foreign_overlay,
            "patches": [
                {"name": p.name, "file": p.file, "layer": p.layer, "summary": p.summary, "state": p.state, "files": p.files, "reason": p.reason}
                for p in self.patches
            ],
        }


def status(loaded: LoadedSeries, directory: Path) -> StatusReport:
    lock = loaded.require_lock()
    repo = target.open_target(directory)
    state = history.read(repo, lock.upstream.commit)
    journal = target.pending(repo)
    report = StatusReport(directory, lock.upstream.commit, state.head, state.base,
                          [p for _, p in gitcmd.dirty_paths(repo)], journal["operation"] if journal else None,
                          user_commits=list(state.user_commits))
    # The series' own state is judged below the user's commits (they are not part of it).
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, state.series_head)) if state.series_head else None
    amended = history.first_amended(repo, state, loaded.patches, loaded.patched_tree) if state.base == lock.upstream.commit else None
    for index, loaded_patch in enumerate(loaded.patches):
        item = PatchState(loaded_patch.name, loaded_patch.entry.file, loaded_patch.entry.summary, NOT_APPLIED, list(loaded_patch.patch.paths),
                          layer=loaded_patch.layer)
        if index < len(state.applied):
            applied = state.applied[index]
            if amended is not None and amended.index == index:
                item.state, item.reason = CONFLICTING, (f"its commit {amended.commit[:12]} holds changes that are not the patch's "
                                                        f"({', '.join(amended.paths)}): an edit of yours amended into it")
            elif applied.key == loaded_patch.key:
                item.state = APPLIED
            else:
                what = "the overlay patch" if applied.layer == OVERLAY else "patch"
                item.state, item.reason = CONFLICTING, f"the target has {what} {applied.name!r} (sha256 {applied.sha256[:12]}…) in this place"
        elif applier is None:
            item.state, item.reason = CONFLICTING, "the target has no commit"
        else:
            try:
                applier.apply(loaded_patch)
            except RocmpatchError as exc:
                item.state, item.reason = CONFLICTING, exc.message
        report.patches.append(item)
    report.foreign_overlay = [a.name for a in state.applied[len(loaded.patches):] if a.layer == OVERLAY]
    return report


def descends_from(directory: Path, pin: str, head: str | None) -> bool:
    """Whether HEAD is the pin or a descendant (the user committed on it): a checkout of the release."""
    if head is None:
        return False
    repo = gitcmd.open_repo(directory)
    return gitcmd.has_object(repo, pin) and gitcmd.is_ancestor(repo, pin, head)
