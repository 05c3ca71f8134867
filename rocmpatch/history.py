"""How an applied series shows in a target's history, and how we read it back.

Each applied patch is one commit on top of the pin: message "<name>: <summary>", the patch's
description, and two trailers

    Rocmpatch-Patch: <name>
    Rocmpatch-Patch-Sha256: <sha256 of the patch file>

Author and committer are a fixed identity dated at the pin's commit date, so the same series on
the same pin gives the same commit ids on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import git

from rocmpatch import gitcmd
from rocmpatch.series import LoadedPatch

NAME_TRAILER = "Rocmpatch-Patch"
SHA_TRAILER = "Rocmpatch-Patch-Sha256"
IDENTITY_NAME = "rocmpatch"
IDENTITY_EMAIL = "rocmpatch@invalid"


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    sha256: str
    commit: str


@dataclass(frozen=True)
class History:
    head: str | None  # None in a repository without commits
    base: str | None  # the first commit below HEAD that is not a rocmpatch commit
    applied: tuple[AppliedPatch, ...]  # in series order (oldest first)


def read(repo: git.Repo) -> History:
    head = gitcmd.head_commit(repo)
    applied: list[AppliedPatch] = []
    commit = head
    while commit is not None:
        trailers, parents = gitcmd.commit_links(repo, commit)
        if NAME_TRAILER not in trailers or SHA_TRAILER not in trailers:
            break
        applied.append(AppliedPatch(trailers[NAME_TRAILER], trailers[SHA_TRAILER], commit))
        commit = parents[0] if len(parents) == 1 else None
    return History(head, commit, tuple(reversed(applied)))


def commit_patch(repo: git.Repo, loaded: LoadedPatch, tree: str, parent: str, pin: str) -> str:
    entry = loaded.entry
    message = f"{entry.name}: {entry.summary}\n\n{entry.description}\n"
    identity = gitcmd.Identity(IDENTITY_NAME, IDENTITY_EMAIL, gitcmd.commit_date(repo, pin))
    trailers = [(NAME_TRAILER, entry.name), (SHA_TRAILER, loaded.sha256)]
    return gitcmd.commit_tree(repo, tree, parent, message, identity, trailers)
