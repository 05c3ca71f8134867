"""`rocmpatch lock`: compute a release's entry in upstream.lock from its series.yaml, patch files
and upstream commit.

The lock is the only place the pins and the patched tree ids are written; apply, verify and check
trust nothing else. Re-pinning (a new commit) goes through here too, e.g. from `rebase`. Writing one
release's entry keeps every other release's entry as it is.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd, store
from rocmpatch.errors import InvalidInput
from rocmpatch.files import replace_file
from rocmpatch.schema import Lock, LockFile, Upstream, is_full_commit_id
from rocmpatch.series import LoadedSeries, Location
from rocmpatch.trees import patch_trees


@dataclass(frozen=True)
class Pin:
    """What to pin; each None field keeps the current lock's value."""

    url: str | None = None
    ref: str | None = None
    commit: str | None = None


def compute(loaded: LoadedSeries, pin: Pin = Pin(), *, url_override: str | None = None) -> Lock:
    current = loaded.lock.upstream if loaded.lock else None
    url = pin.url or (current.url if current else None)
    ref = pin.ref or (current.ref if current else None)
    commit = pin.commit or (current.commit if current else None)
    if not (url and ref and commit):
        release = loaded.location.release
        raise InvalidInput(loaded.location.lock_path, f"has no pin for release {release!r}, and none was given",
                           hint=f"run 'rocmpatch lock --release {release} --url URL --ref TAG --commit <40-hex id>' once")
    if not is_full_commit_id(commit):
        raise InvalidInput("--commit", f"expected a full 40-hex commit id, got {commit!r}", hint="a tag or branch name belongs in --ref")
    gitcmd.check_url(url, source="--url")
    # A new commit has no known tree yet: the cache checks it only when the lock had one.
    known_tree = current.tree if current and current.commit == commit else ""
    repo = store.cached_repo(Upstream(url, ref, commit, known_tree), url_override)
    tree = gitcmd.tree_of(repo, commit)
    date = gitcmd.commit_date(repo, commit).astimezone(datetime.timezone.utc).isoformat()  # UTC: sorts as text
    with store.scratch_over(repo) as scratch:  # the cache is only read (`lock --check` on a read-only cache)
        steps = patch_trees(scratch, tree, loaded.patches)
    return Lock(Upstream(url, ref, commit, tree, date), loaded.locked_patches(), steps[-1].tree)


def write(location: Location, lock: Lock) -> None:
    """Replace the release's entry, keeping the others; atomically: a reader sees the old lock or the new one."""
    current = location.patchsets.lock_file() or LockFile({})
    path: Path = location.lock_path
    replace_file(path, current.with_release(location.release, lock).to_yaml().encode("utf-8"))


def stale_fields(old: Lock | None, new: Lock) -> list[str]:
    """What differs between the committed lock and a fresh one, as short phrases."""
    if old is None:
        return ["everything (there was no lock)"]
    found = []
    for field in ("url", "ref", "commit", "tree", "date"):
        if getattr(old.upstream, field) != getattr(new.upstream, field):
            found.append(f"upstream.{field}")
    old_patches = {p.name: p for p in old.patches}
    for patch in new.patches:
        if old_patches.get(patch.name) != patch:
            found.append(f"patch {patch.name}")
    for name in old_patches.keys() - {p.name for p in new.patches}:
        found.append(f"patch {name} (no longer in the series)")
    if not found and [p.name for p in old.patches] != [p.name for p in new.patches]:
        found.append("patch order")
    if old.patched_tree != new.patched_tree:
        found.append("patched_tree")
    return found
