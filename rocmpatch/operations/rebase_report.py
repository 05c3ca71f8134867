"""`rebase --report`: the size of a port before it starts. Every patch of the series is tried onto
the new ref, with the steps `rebase` takes (rebase.attempt), without stopping and without writing
anything but a throwaway scratch repository:

* exact: the patch applies with no fuzz and no offset to the tree the patches before it produced;
* 3-way: it merges cleanly (`upstream_has_it` when the merge changes nothing: rebase would drop it);
* conflict: the merge conflicts, in the files named, each with its kind (rebase_conflicts).

After a conflict the next patches are tried on the best tree there is without a person: the
conflicting patch's cleanly merged files kept (`carried`), its conflicted files as they were before
it (upstream's side), as if the conflict had been resolved by taking upstream's version. A later
patch that needs the part that conflicted then conflicts too, as it would in the real rebase.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rocmpatch import gitcmd, store
from rocmpatch.operations import rebase
from rocmpatch.operations.rebase_conflicts import Conflict, conflicts_of
from rocmpatch.series import LoadedPatch

EXACT, THREE_WAY, CONFLICT = "exact", "3-way", "conflict"


@dataclass
class PatchReport:
    name: str
    layer: str
    result: str  # EXACT, THREE_WAY or CONFLICT
    upstream_has_it: bool = False  # a clean merge that changes nothing
    conflicts: list[Conflict] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)  # at a conflict: its cleanly merged files, kept for the next patches


@dataclass
class RebaseReport:
    release: str
    pin: str
    onto_ref: str
    onto: str
    patches: list[PatchReport]
    seconds: float

    @property
    def totals(self) -> dict[str, int]:
        return {result: sum(p.result == result for p in self.patches) for result in (EXACT, THREE_WAY, CONFLICT)}

    def to_json(self) -> dict:
        patches = [{"name": p.name, "layer": p.layer, "result": p.result, "upstream_has_it": p.upstream_has_it,
                    "conflicts": [{"path": c.path, "kind": c.kind} for c in p.conflicts], "carried": p.carried}
                   for p in self.patches]
        return {"release": self.release, "pin": self.pin, "onto_ref": self.onto_ref, "onto": self.onto,
                "totals": self.totals, "seconds": round(self.seconds, 2), "patches": patches}


def report(source: gitcmd.Repo, release: str, pin: str, onto: str, onto_ref: str, patches: list[LoadedPatch]) -> RebaseReport:
    """Each patch tried onto `onto` (a commit of `source`) after the ones before it; `source` is only read."""
    started = time.monotonic()
    found = []
    with store.scratch_over(source) as work:
        originals = rebase.original_chain(work, pin, patches)
        tip = gitcmd.tree_of(work, onto)
        for index, item in enumerate(patches):
            tried = rebase.attempt(work, tip, originals[index - 1] if index else pin, originals[index], item)
            if tried.merge is None:
                result = EXACT if tried.result == rebase.CLEAN else THREE_WAY
                found.append(PatchReport(item.name, item.layer, result, upstream_has_it=tried.tree == tip))
                tip = tried.tree
                continue
            best = _before_the_patch(work, tip, tried.tree, tried.merge.conflicts)
            found.append(PatchReport(item.name, item.layer, CONFLICT, conflicts=conflicts_of(work, tried.merge),
                                     carried=gitcmd.changed_paths(work, tip, best)))
            tip = best
    return RebaseReport(release, pin, onto_ref, onto, found, time.monotonic() - started)


def _before_the_patch(work: gitcmd.Repo, tip: str, merged: str, paths: tuple[str, ...]) -> str:
    """The merged tree with each of `paths` as it was in `tip` (gone where tip has no file there)."""
    before = gitcmd.TreeReader(work, tip).entries
    kept = {path: before[path] for path in paths if path in before and before[path].mode != gitcmd.GITLINK_MODE}
    changes = {path: gitcmd.read_blob(work, kept[path].sha) if path in kept else None for path in paths}
    return gitcmd.write_tree(work, merged, changes, {path: entry.mode for path, entry in kept.items()})
