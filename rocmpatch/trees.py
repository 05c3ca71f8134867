"""The series applied to git trees in memory: one tree id per patch, no working tree involved.

apply, check, lock and verify all start here, so a series that does not apply fails before any
target is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from rocmpatch import gitcmd
from rocmpatch.errors import InvalidInput
from rocmpatch.patching import Overlay, apply_patch
from rocmpatch.series import LoadedPatch


@dataclass(frozen=True)
class Step:
    patch: LoadedPatch
    tree: str  # the tree after this patch (and all before it)


class SeriesApplier:
    """Patches applied one after another on top of a base tree, all in memory."""

    def __init__(self, repo: gitcmd.Repo, base_tree: str) -> None:
        self.repo, self.base_tree = repo, base_tree
        self.reader = gitcmd.TreeReader(repo, base_tree)
        self.overlay = Overlay(self.reader.read)
        self.changes = self.overlay.changes  # everything since base_tree
        self.modes: dict[str, int] = {}
        self._tree, self._unwritten = base_tree, {}  # the last tree written, and changes since

    def read(self, path: str) -> bytes | None:
        return self.overlay.read(path)

    def apply(self, loaded: LoadedPatch) -> None:
        """Apply one more patch; on PatchConflict / InvalidInput nothing of it is kept."""
        refuse_symlinks(self.reader, loaded)
        self._refuse_new_symlinks(loaded)
        changes = apply_patch(loaded.patch, self.read)
        self.overlay.update(changes)
        self._unwritten.update(changes)
        for file_patch in loaded.patch.files:
            if file_patch.old_path is None and file_patch.new_path:
                self.modes[file_patch.new_path] = int(file_patch.new_mode, 8)

    def _refuse_new_symlinks(self, loaded: LoadedPatch) -> None:
        """Nor through a symlink an earlier patch of the series added."""
        for path in loaded.patch.paths:
            parts = path.split("/")
            for end in range(1, len(parts) + 1):
                prefix = "/".join(parts[:end])
                if self.modes.get(prefix) == gitcmd.SYMLINK_MODE and self.changes.get(prefix) is not None:
                    raise InvalidInput(loaded.path, f"touches {path!r} through the symlink {prefix!r} an earlier patch added", hint="a patch may only change regular files; patch the link's target instead")

    def tree(self) -> str:
        """The tree id of the current state (written to the repository's object store)."""
        if self._unwritten:  # only this step's files are written: the rest is in the last tree
            self._tree = gitcmd.write_tree(self.repo, self._tree, self._unwritten, self.modes)
            self._unwritten = {}
        return self._tree


def patch_trees(repo: gitcmd.Repo, base_tree: str, patches: Iterable[LoadedPatch]) -> list[Step]:
    """Apply patches in order on base_tree; raise PatchConflict / InvalidInput on the first problem."""
    applier = SeriesApplier(repo, base_tree)
    steps = []
    for loaded in patches:
        applier.apply(loaded)
        steps.append(Step(loaded, applier.tree()))
    return steps


def refuse_symlinks(reader: gitcmd.TreeReader, loaded: LoadedPatch) -> None:
    for path in loaded.patch.paths:
        link = reader.symlink_on_path(path)
        if link is not None:
            raise InvalidInput(loaded.path, f"touches {path!r} through the symlink {link!r}", hint="a patch may only change regular files; patch the link's target instead")


def touched_by(patches: Iterable[LoadedPatch]) -> dict[str, list[str]]:
    """{path: names of the patches that touch it}."""
    found: dict[str, list[str]] = {}
    for loaded in patches:
        for path in loaded.patch.paths:
            found.setdefault(path, []).append(loaded.name)
    return found
