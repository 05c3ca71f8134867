"""How an applied series shows in a target's history, and how we read it back.

Each applied patch is one commit on top of the pin: message "<name>: <summary>", the patch's
description, and two trailers

    Rocmpatch-Patch: <name>
    Rocmpatch-Patch-Sha256: <sha256 of the patch file>

An overlay's patch (a framework's own, applied after the release's series) carries
`Rocmpatch-Overlay-Patch` and `Rocmpatch-Overlay-Patch-Sha256` instead, so the two layers stay
apart in the history (and an older rocmpatch takes an overlay's commits for a user's own).

Author and committer are a fixed identity dated at the pin's commit date, so the same series on
the same pin gives the same commit ids on every machine; which is why the store can keep the
applied series once per (pin, series) and hand it to every new target (see series_key).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Sequence

from rocmpatch import gitcmd, trees
from rocmpatch.errors import TargetRefused
from rocmpatch.series import OVERLAY, RELEASE, LoadedPatch, LoadedSeries
from rocmpatch.trees import Amended

NAME_TRAILER = "Rocmpatch-Patch"
SHA_TRAILER = "Rocmpatch-Patch-Sha256"
OVERLAY_NAME_TRAILER = "Rocmpatch-Overlay-Patch"
OVERLAY_SHA_TRAILER = "Rocmpatch-Overlay-Patch-Sha256"
TRAILERS = {RELEASE: (NAME_TRAILER, SHA_TRAILER), OVERLAY: (OVERLAY_NAME_TRAILER, OVERLAY_SHA_TRAILER)}
IDENTITY_NAME = "rocmpatch"
IDENTITY_EMAIL = "rocmpatch@invalid"


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    sha256: str
    commit: str
    layer: str = RELEASE  # which trailers the commit carries

    @property
    def key(self) -> tuple[str, str, str]:
        return self.layer, self.name, self.sha256


def _carried(trailers: dict[str, str]) -> tuple[str, str, str] | None:
    """(layer, name, sha256) of the patch a commit's trailers name, or None: not a rocmpatch commit."""
    for layer, (name_key, sha_key) in TRAILERS.items():
        if name_key in trailers and sha_key in trailers:
            return layer, trailers[name_key], trailers[sha_key]
    return None


MAX_USER_COMMITS = 200  # how far above the series we look for the user's own commits


@dataclass(frozen=True)
class History:
    head: str | None  # None in a repository without commits
    base: str | None  # the first commit below the series that is not a rocmpatch commit
    applied: tuple[AppliedPatch, ...]  # in series order (oldest first)
    user_commits: tuple[str, ...] = ()  # the user's own commits on top of the series, newest first

    @property
    def series_head(self) -> str | None:
        """The last commit of the series (or the base): HEAD without the user's commits."""
        return self.applied[-1].commit if self.applied else self.base


def read(repo: gitcmd.Repo, pin: str | None = None) -> History:
    """The series as applied in repo. With `pin`, plain commits on top of the series are
    recognised as the user's own, rather than taken for the base."""
    head = gitcmd.head_commit(repo)
    user_commits = _user_commits(repo, head, pin) if pin else []
    applied: list[AppliedPatch] = []
    commit = head
    if user_commits:
        commit = gitcmd.commit_links(repo, user_commits[-1])[1][0]
    while commit is not None:
        trailers, parents = gitcmd.commit_links(repo, commit)
        carried = _carried(trailers)
        if carried is None:
            break
        layer, name, sha256 = carried
        applied.append(AppliedPatch(name, sha256, commit, layer))
        commit = parents[0] if len(parents) == 1 else None
    return History(head, commit, tuple(reversed(applied)), tuple(user_commits))


def _user_commits(repo: gitcmd.Repo, head: str | None, pin: str) -> list[str]:
    """Single-parent commits without our trailers between HEAD and the first rocmpatch commit;
    none when there is no such commit (commits right on the pin may as well be upstream's)."""
    found: list[str] = []
    commit = head
    while commit is not None and commit != pin and len(found) < MAX_USER_COMMITS:
        trailers, parents = gitcmd.commit_links(repo, commit)
        if _carried(trailers) is not None:
            return found
        found.append(commit)
        commit = parents[0] if len(parents) == 1 else None
    return []


COMMIT_FORMAT = 1  # raise when commit_patch's commits change: it retires every cached series head


def series_key(patches: Iterable[LoadedPatch], pin: str) -> str:
    """What decides the commits commit_patch makes for a series on `pin`: the pin, and each patch's
    name, bytes (their sha256), summary and description, in order."""
    digest = hashlib.sha256(f"rocmpatch series commits {COMMIT_FORMAT}\n{pin}\n".encode())
    for loaded in patches:
        entry = loaded.entry
        fields = [entry.name, loaded.sha256, entry.summary, entry.description]
        if loaded.layer != RELEASE:  # its commit carries other trailers (a release's key is as it was)
            fields.append(loaded.layer)
        digest.update(json.dumps(fields).encode("utf-8") + b"\n")
    return digest.hexdigest()


def commit_patch(repo: gitcmd.Repo, loaded: LoadedPatch, tree: str, parent: str, pin: str) -> str:
    entry = loaded.entry
    message = f"{entry.name}: {entry.summary}\n\n{entry.description}\n"
    identity = gitcmd.Identity(IDENTITY_NAME, IDENTITY_EMAIL, gitcmd.commit_date(repo, pin))
    name_key, sha_key = TRAILERS[loaded.layer]
    trailers = [(name_key, entry.name), (sha_key, loaded.sha256)]
    return gitcmd.commit_tree(repo, tree, parent, message, identity, trailers)


def refuse_other_patches(repo: gitcmd.Repo, state: History, loaded: LoadedSeries) -> None:
    """TargetRefused when the target carries a patch that is not the stack's at its place: another
    version of a release patch, or an overlay's patches while no (or another) overlay is given."""
    _refuse_other(repo, state, loaded, layers=(RELEASE, OVERLAY))


def refuse_unchecked_overlay(repo: gitcmd.Repo, state: History, loaded: LoadedSeries) -> None:
    """TargetRefused when the target carries an overlay's commit that the stack given does not
    hold at its place: it cannot be checked against its patch, so unapply would lose an edit
    amended into it. (A release patch of another version is taken off as before.)"""
    _refuse_other(repo, state, loaded, layers=(OVERLAY,))


def _refuse_other(repo: gitcmd.Repo, state: History, loaded: LoadedSeries, *, layers: tuple[str, ...]) -> None:
    directory = repo.working_tree_dir
    for index, applied in enumerate(state.applied):
        expected = loaded.patches[index] if index < len(loaded.patches) else None
        if applied.layer not in layers or (expected is not None and expected.key == applied.key):
            continue
        if applied.layer == OVERLAY and loaded.overlay is None:
            count = sum(a.layer == OVERLAY for a in state.applied)
            raise TargetRefused(f"{directory}: carries {count} patch(es) of an overlay on top of the series ({applied.name!r} first); nothing was changed",
                                hint="give that overlay with --overlay DIR (or ROCMPATCH_OVERLAY), so that rocmpatch can tell its commits from your edits")
        what = "overlay patch" if applied.layer == OVERLAY else "patch"
        raise TargetRefused(
            f"{directory}: carries the {what} {applied.name!r} (sha256 {applied.sha256[:12]}…) that is not patch {index + 1} of {loaded.describe()}; nothing was changed",
            hint="run 'rocmpatch unapply' (with the --overlay the target was made with) to go back to the pin, then apply again",
        )


def first_amended(repo: gitcmd.Repo, state: History, patches: Sequence[LoadedPatch], patched_tree: str | None = None) -> Amended | None:
    """The first commit of the series in `state` whose change is not exactly its patch's (a user's
    edit amended into it): the user's work, even though it carries our trailers. Only the commits
    whose name and sha256 are the series' own at that place can be checked, from the base up.

    `patched_tree` (the lock's): a whole series whose last commit has exactly that tree holds
    nothing of the user's (nothing would be lost going back to the pin), so it is not searched."""
    if patched_tree and len(state.applied) == len(patches) and state.applied \
            and [a.key for a in state.applied] == [p.key for p in patches] \
            and gitcmd.tree_of(repo, state.applied[-1].commit) == patched_tree:
        return None
    same = 0
    for applied, loaded in zip(state.applied, patches):
        if applied.key != loaded.key:
            break
        same += 1
    if not same or state.base is None:
        return None
    return trees.first_amended(repo, state.base, [a.commit for a in state.applied[:same]], patches[:same])


def series_tree(repo: gitcmd.Repo, state: History, patches: Sequence[LoadedPatch], amended: Amended | None) -> str:
    """The tree the series gives for the patches `state` has applied (written to repo): the top
    rocmpatch commit's tree, unless a commit below it was amended, then the patches from there on
    applied again to the last commit that is exactly the series'."""
    if amended is None:
        return gitcmd.tree_of(repo, state.series_head)
    parent = state.applied[amended.index - 1].commit if amended.index else state.base
    applier = trees.SeriesApplier(repo, gitcmd.tree_of(repo, parent))
    for loaded in patches[amended.index:len(state.applied)]:
        applier.apply(loaded)
    return applier.tree()


def refuse_user_work(repo: gitcmd.Repo, state: History, amended: Amended | None = None) -> None:
    """TargetRefused naming the user's commits on top of the series, or the series commit a user's
    edit was amended into, and how to keep them."""
    directory = repo.working_tree_dir
    saving = "'rocmpatch unapply --force' saves it all as one patch file and goes back to the pin (then 'rocmpatch apply' and 'git apply' that file); or "
    if state.user_commits:
        count = len(state.user_commits)
        subject = gitcmd.commit_info(repo, state.user_commits[0]).subject
        raise TargetRefused(
            f"{directory}: has {count} commit(s) of your own on top of the series (HEAD {state.user_commits[0][:12]} {subject!r}); nothing was changed",
            hint=saving + f"save them with 'git -C {directory} format-patch -o <dir> {state.series_head}..HEAD' (or add them to the series as a patch), "
                          f"then 'git -C {directory} reset --hard {state.series_head}' and rerun",
        )
    if amended is not None:
        paths = ", ".join(amended.paths[:5]) + (f" and {len(amended.paths) - 5} more" if len(amended.paths) > 5 else "")
        raise TargetRefused(
            f"{directory}: the commit of patch {amended.name} ({amended.commit[:12]}) holds changes that are not the patch's ({paths}): "
            "an edit amended into it is yours, not the series'; nothing was changed",
            hint=saving + f"'git -C {directory} show {amended.commit[:12]}' shows it",
        )
