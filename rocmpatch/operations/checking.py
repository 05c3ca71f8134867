"""`rocmpatch check`: the CI gate for the series.

Each patch is applied, in order, to the pinned commit's objects in the cache (in memory, no
working tree); every patch is reported, not just the first failure, and the final tree is
compared with the lock's patched_tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocmpatch import store
from rocmpatch.errors import RocmpatchError
from rocmpatch.series import LoadedSeries
from rocmpatch.trees import SeriesApplier, Step, lock_mismatches


@dataclass
class PatchReport:
    name: str
    file: str
    files: list[str]
    ok: bool
    error: str | None = None
    layer: str = "release"  # release | overlay


@dataclass
class CheckReport:
    commit: str
    expected_tree: str | None
    patched_tree: str | None = None  # None when some patch failed
    patches: list[PatchReport] = field(default_factory=list)
    lock_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lock_problems and all(p.ok for p in self.patches) and self.patched_tree == self.expected_tree

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "commit": self.commit,
            "patched_tree": {"expected": self.expected_tree, "actual": self.patched_tree},
            "lock_problems": self.lock_problems,
            "patches": [{"name": p.name, "file": p.file, "layer": p.layer, "ok": p.ok, "error": p.error, "files": p.files} for p in self.patches],
        }


def check(loaded: LoadedSeries, *, url_override: str | None = None) -> CheckReport:
    lock = loaded.require_lock()  # stale is reported below; without a lock there is no pin to check against
    cache = store.cached_repo(lock.upstream, url_override)
    report = CheckReport(lock.upstream.commit, loaded.patched_tree if loaded.overlay is None or loaded.overlay.lock else None,
                         lock_problems=loaded.lock_problems())
    with store.scratch_over(cache) as repo:  # the cache is only read: it may be read-only
        applier = SeriesApplier(repo, lock.upstream.tree)
        failed = False
        under_overlay: list[Step] = []  # the tree the release's series gives, below an overlay
        for loaded_patch in loaded.patches:
            item = PatchReport(loaded_patch.name, loaded_patch.entry.file, list(loaded_patch.patch.paths), ok=True, layer=loaded_patch.layer)
            try:
                applier.apply(loaded_patch)
            except RocmpatchError as exc:
                item.ok, item.error, failed = False, str(exc), True
            report.patches.append(item)
            if loaded.overlay is not None and loaded_patch is loaded.release_patches[-1] and not failed:
                under_overlay.append(Step(loaded_patch, applier.tree()))
        if not failed:
            report.patched_tree = applier.tree()  # compared with the lock's in `ok`
            report.lock_problems += lock_mismatches(loaded, under_overlay)
    return report
