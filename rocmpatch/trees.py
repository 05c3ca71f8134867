"""The series applied to git trees in memory: one tree id per patch, no working tree involved.

apply, check, lock and verify all start here, so a series that does not apply fails before any
target is touched. A stack (a release's series with a framework's overlay on top) goes through the
same applier in one pass: the overlay's patches see the tree the release's series left, symlinks
it added included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from rocmpatch import gitcmd
from rocmpatch.errors import InvalidInput, PatchConflict, RocmpatchError
from rocmpatch.patching import ChangedFiles, apply_patch
from rocmpatch.series import OVERLAY, LoadedPatch, LoadedSeries


@dataclass(frozen=True)
class Step:
    patch: LoadedPatch
    tree: str  # the tree after this patch (and all before it)


class SeriesApplier:
    """Patches applied one after another on top of a base tree, all in memory."""

    def __init__(self, repo: gitcmd.Repo, base_tree: str) -> None:
        self.repo, self.base_tree = repo, base_tree
        self.reader = gitcmd.TreeReader(repo, base_tree)
        self.files = ChangedFiles(self.reader.read)
        self.changes = self.files.changes  # everything since base_tree
        self.modes: dict[str, int] = {}
        self._tree, self._unwritten = base_tree, {}  # the last tree written, and changes since
        self._pin_links: dict[str, str] | None = None  # the base tree's symlinks: path -> target

    def read(self, path: str) -> bytes | None:
        return self.files.read(path)

    def apply(self, loaded: LoadedPatch) -> None:
        """Apply one more patch; on PatchConflict / InvalidInput nothing of it is kept."""
        refuse_symlinks(self.reader, loaded)
        self._refuse_new_symlinks(loaded)
        try:
            changes = apply_patch(loaded.patch, self.read)
        except PatchConflict as conflict:
            if loaded.layer != OVERLAY:
                raise
            raise PatchConflict(f"{conflict.patch} of the overlay ({loaded.path})", conflict.path, conflict.hunk, conflict.reason,
                                hint=f"the overlay no longer applies on the release's series: fix that patch (or 'rocmpatch rebase --overlay {loaded.path.parent}'), "
                                     f"then 'rocmpatch lock --overlay {loaded.path.parent}'") from None
        modes = new_file_modes(loaded)
        self._refuse_escaping_symlinks(loaded, changes, modes)
        self.files.update(changes)
        self._unwritten.update(changes)
        self.modes.update(modes)

    def _refuse_escaping_symlinks(self, loaded: LoadedPatch, changes: dict[str, bytes | None], modes: dict[str, int]) -> None:
        """Each symlink is judged by where it resolves in the tree as this patch leaves it, through
        the tree's other symlinks (`b -> .` and `a -> b/..` are each inside lexically; together
        `a` leaves the tree). The base tree's own links that leave it already are upstream's."""
        all_modes = {**self.modes, **modes}
        if gitcmd.SYMLINK_MODE not in all_modes.values():
            return
        all_changes = {**self.changes, **changes}
        added = {path: data for path, mode in all_modes.items() if mode == gitcmd.SYMLINK_MODE and (data := all_changes.get(path)) is not None}
        if self._pin_links is None:
            self._pin_links = {path: gitcmd.read_blob(self.repo, entry.sha).decode("utf-8", "surrogateescape")
                               for path, entry in self.reader.entries.items() if entry.mode == gitcmd.SYMLINK_MODE}
        links = {**self._pin_links, **{path: data.decode("utf-8", "surrogateescape") for path, data in added.items()}}
        upstream_own = escaping_symlinks(self._pin_links)
        for link, why in escaping_symlinks(links).items():
            if link not in upstream_own:
                raise InvalidInput(loaded.path, f"the symlink {link!r} -> {links[link]!r} {why}, through the other symlinks of the patched tree",
                                   hint="a symlink a patch adds must resolve to a path inside the tree (not into .git), following every symlink on its way")

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


def lock_mismatches(loaded: LoadedSeries, steps: Sequence[Step]) -> list[str]:
    """Where the trees `steps` reached (the stack applied on the pin, or its last part) differ from
    what the locks record: the tree after the release's last patch against upstream.lock's
    patched_tree, after the overlay's last patch against overlay.lock's; one line each."""
    found = []
    ends = {}
    if loaded.release_patches:
        ends[loaded.release_patches[-1].key] = (loaded.lock.patched_tree if loaded.lock else None, loaded.location.lock_path)
    if loaded.overlay is not None and loaded.overlay.patches:
        overlay_lock = loaded.overlay.lock
        ends[loaded.overlay.patches[-1].key] = (overlay_lock.patched_tree if overlay_lock else None, loaded.overlay.lock_path)
    for step in steps:
        expected, lock_path = ends.get(step.patch.key, (None, None))
        if expected is not None and step.tree != expected:
            found.append(f"{lock_path}: patched_tree is {expected}, but the series gives {step.tree}")
    return found


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


def new_file_modes(loaded: LoadedPatch) -> dict[str, int]:
    """The modes of the files a patch creates (an existing file keeps its mode)."""
    return {f.new_path: int(f.new_mode, 8) for f in loaded.patch.files if f.old_path is None and f.new_path}


@dataclass(frozen=True)
class Amended:
    """A commit that carries a patch's trailers but whose change is not (only) that patch's: a
    user's edit amended into it, or a commit rewritten by hand."""

    index: int  # its place in the series (0: the first patch)
    name: str
    commit: str
    paths: tuple[str, ...]  # where it differs from what the patch gives


def first_amended(repo: gitcmd.Repo, base: str, commits: Sequence[str], patches: Sequence[LoadedPatch]) -> Amended | None:
    """The first of `commits` (the series' commits on `base`, oldest first; commits[i] carrying
    patches[i]) whose change from its parent is not exactly its patch applied to that parent.

    Read-only and cheap: one `git diff-tree --stdin` lists every commit's changed entries, and only
    the files each patch touches are read and patched (through cat-file), never a whole tree, so
    apply, unapply and status can afford it on every run. Later commits are built on the first
    amended one, so the search stops there."""
    parents = [base, *commits[:-1]]
    listed = _changed_entries(repo, list(zip(commits, parents)))
    for index, (commit, parent, loaded) in enumerate(zip(commits, parents, patches)):
        read = _reader(repo, parent)
        try:
            changes = apply_patch(loaded.patch, read)
        except RocmpatchError:  # the patch does not even apply to the parent: not its commit
            return Amended(index, loaded.name, commit, tuple(loaded.patch.paths))
        modes = new_file_modes(loaded)
        expected: dict[str, tuple[int, str] | None] = {}
        for path, data in changes.items():
            if data != read(path):
                expected[path] = None if data is None else (modes.get(path, 0), gitcmd.blob_id(data))
        actual = listed.get(commit, {})
        differing = sorted(path for path in expected.keys() | actual.keys()
                           if path not in actual or path not in expected or not _same(expected[path], actual[path]))
        if differing:
            return Amended(index, loaded.name, commit, tuple(differing))
    return None


def _same(expected: tuple[int, str] | None, actual: tuple[int, int, str]) -> bool:
    """Whether a changed entry (old mode, new mode, new id; new mode 0 when deleted) is what the
    patch gives: the same content, a new file with the patch's mode, an existing one keeping its mode."""
    old_mode, new_mode, new_id = actual
    if expected is None:
        return new_mode == 0
    mode, blob = expected
    return new_id == blob and new_mode == (old_mode or mode or gitcmd.REGULAR_MODE)


def _reader(repo: gitcmd.Repo, commit: str):
    """The regular files of `commit`, read one by one (None: not a file there)."""
    cache: dict[str, bytes | None] = {}

    def read(path: str) -> bytes | None:
        if path not in cache:
            found = repo.read_object(f"{commit}:{path}")
            cache[path] = found[2] if found is not None and found[1] == "blob" else None
        return cache[path]

    return read


def _changed_entries(repo: gitcmd.Repo, pairs: list[tuple[str, str]]) -> dict[str, dict[str, tuple[int, int, str]]]:
    """{commit: {path: (old mode, new mode, new blob id)}} for each (commit, parent) pair."""
    if not pairs:
        return {}
    out = gitcmd.run_bytes(repo, "diff-tree", "--stdin", "--always", "-r", "-z", "--no-renames",
                           stdin="".join(f"{commit} {parent}\n" for commit, parent in pairs).encode())
    found: dict[str, dict[str, tuple[int, int, str]]] = {}
    current: dict[str, tuple[int, int, str]] = {}
    fields = iter(out.split(b"\0"))
    for field in fields:
        if field.startswith(b":"):  # ":old_mode new_mode old_id new_id status", then the path
            old_mode, new_mode, _, new_id, _ = field[1:].decode().split(" ")
            current[next(fields).decode("utf-8", "surrogateescape")] = (int(old_mode, 8), int(new_mode, 8), new_id)
        elif field.strip():
            current = found.setdefault(field.strip().decode(), {})
    return found


MAX_SYMLINKS = 40  # links followed in resolving one path, as Linux allows


def escaping_symlinks(links: Mapping[str, str]) -> dict[str, str]:
    """{path: why} for each symlink of a tree (`links`: path -> target) that, resolved the way the
    kernel would resolve it in a checkout of the tree, through the tree's other symlinks, leaves
    the tree, enters a .git directory or loops."""
    found = {}
    for path, link_target in links.items():
        why = _resolve(links, path.split("/")[:-1], link_target, [MAX_SYMLINKS])
        if isinstance(why, str):
            found[path] = why
    return found


def _resolve(links: Mapping[str, str], directory: list[str], link_target: str, budget: list[int]) -> list[str] | str:
    """The path components `link_target` leads to from `directory`, or why it goes wrong."""
    if link_target.startswith("/"):
        return "is absolute"
    parts = list(directory)
    for part in link_target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return "resolves outside the tree"
            parts.pop()
            continue
        if part.lower() == ".git":
            return "resolves into .git"
        parts.append(part)
        inner = links.get("/".join(parts))
        if inner is not None:
            budget[0] -= 1
            if budget[0] < 0:
                return "resolves through too many symlinks (a loop)"
            resolved = _resolve(links, parts[:-1], inner, budget)
            if isinstance(resolved, str):
                return resolved
            parts = resolved
    return parts
