"""Where upstream breaks each patch of the series, found from git objects alone.

How the walk is defined (docs/drift.md says the same for users):

* FROM is the pin (or A of --range A..B), TO is REF (or B). They need not be related by ancestry:
  core_v0.5.0 sits on a release branch. The walk starts at their merge base and follows TO's
  first-parent line, oldest first (the commits that landed on main, merges included; each compared
  with its first parent). The series is also tried at FROM itself and at the merge base, so a series
  that depends on release-branch commits (merge base..FROM) is reported as such.
* Only a commit that changes a file the series touches can change a verdict, so only those
  candidates are evaluated (`git log --first-parent -- <paths>`); every other commit has the verdict
  of the candidate before it. All candidates are evaluated, in order: applicability need not be
  monotonic (upstream can revert a change), and evaluating a candidate costs a few milliseconds
  because blobs and patch results are cached. No bisection assumption is needed.
* At each commit the patches are applied in series order, exactly (no fuzz, no offset), in memory.
  A patch that does not apply is left out and the next patches are tried on what remains, so one
  early break does not hide where a later patch breaks. A patch that does not apply forward but whose
  change upstream already contains (every hunk's result is present, in order) is *obsolete*.
* A patch's first bad commit is where its final stretch of not applying began (the stretch that
  reaches TO); its last good commit is that commit's first parent, the newest commit where it still
  applied. When a file it needs is gone at the first bad commit, git's rename detection between the
  two says where it went.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from rocmpatch import gitcmd
from rocmpatch.errors import PatchConflict, UpstreamError
from rocmpatch.gitcmd import CommitInfo
from rocmpatch.patching import ChangedFiles, Patch, _split_lines, apply_patch

APPLIES = "applies"
BROKEN = "broken"
OBSOLETE = "obsolete"


@dataclass(frozen=True)
class Verdict:
    state: str  # APPLIES, BROKEN or OBSOLETE
    file: str | None = None  # for BROKEN: the file and hunk that no longer apply, and why
    hunk: int | None = None
    reason: str | None = None


@dataclass
class PatchDrift:
    name: str
    state: str  # the verdict at TO
    at_from: str  # the verdict at FROM (the pin)
    at_base: str  # the verdict at the merge base
    last_good: CommitInfo | None = None  # newest commit on the line where it still applied
    first_bad: CommitInfo | None = None  # where its final stretch of not applying began
    file: str | None = None
    hunk: int | None = None
    reason: str | None = None
    moved_to: str | None = None  # the file was renamed there (git -M) at first_bad
    deleted: bool = False  # the file was deleted at first_bad
    breaks: int = 0  # how many times it went from applying to not applying along the walk
    layer: str = "release"  # release, or overlay: a framework's own patch after the release's series

    @property
    def ok(self) -> bool:
        return self.state == APPLIES


@dataclass
class DriftReport:
    from_commit: str
    to_ref: str
    to: CommitInfo
    base: str  # the merge base of FROM and TO, where the walk starts
    commits: int  # commits on TO's first-parent line after the base
    candidates: int  # of those, commits that change a file of the series
    patches: list[PatchDrift]
    seconds: float = 0.0
    release_commits: list[CommitInfo] = field(default_factory=list)  # base..FROM touching the series

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.patches)

    @property
    def from_on_ref(self) -> bool:
        """Whether the pin is on TO's history; a release tag on a release branch is not."""
        return self.base == self.from_commit

    def to_json(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["from_on_ref"] = self.from_on_ref
        return data


class SeriesEvaluator:
    """Verdicts of every patch on a set of upstream files, with blob and result caches."""

    def __init__(self, repo: gitcmd.Repo, patches: list[Patch]) -> None:
        self.repo = repo
        self.patches = patches
        self.paths = sorted({p for patch in patches for p in patch.paths})
        self._blobs: dict[str, bytes] = {}
        self._results: dict[tuple, tuple[Verdict, dict[str, bytes | None]]] = {}

    def read_blob(self, sha: str) -> bytes:
        data = self._blobs.get(sha)
        if data is None:
            data = self._blobs[sha] = gitcmd.read_blob(self.repo, sha)
        return data

    def evaluate(self, files: dict[str, gitcmd.Entry]) -> list[Verdict]:
        """files: {path: entry} of the series' paths at one commit (missing paths left out)."""
        def at_commit(path: str) -> bytes | None:
            entry = files.get(path)
            if entry is None or entry.mode in (gitcmd.SYMLINK_MODE, gitcmd.GITLINK_MODE):
                return None
            return self.read_blob(entry.sha)

        state = ChangedFiles(at_commit)
        current = state.read

        verdicts = []
        for index, patch in enumerate(self.patches):
            inputs = tuple(current(p) for p in patch.paths)
            key = (index, inputs)  # bytes objects cache their hash, so this key is cheap to look up
            cached = self._results.get(key)
            if cached is None:
                cached = self._results[key] = _verdict(patch, current)
            verdict, changes = cached
            state.update(changes)
            verdicts.append(verdict)
        return verdicts


def _verdict(patch: Patch, read) -> tuple[Verdict, dict[str, bytes | None]]:
    try:
        return Verdict(APPLIES), apply_patch(patch, read)
    except PatchConflict as conflict:
        if contains_change(patch, read):
            return Verdict(OBSOLETE), {}
        return Verdict(BROKEN, conflict.path, conflict.hunk, conflict.reason), {}


def contains_change(patch: Patch, read) -> bool:
    """Whether upstream already has the patch's result: every hunk's new side present in order
    (at any offset), created files present, deleted files gone."""
    for file_patch in patch.files:
        if file_patch.new_path is None:
            if read(file_patch.old_path) is not None:
                return False
            continue
        data = read(file_patch.new_path)
        if data is None:
            return False
        if file_patch.old_path and file_patch.old_path != file_patch.new_path and read(file_patch.old_path) is not None:
            return False
        lines = _split_lines(data)
        position = 0
        for hunk in file_patch.hunks:
            found = _find_block(lines, hunk.new_lines, position)
            if found < 0:
                return False
            position = found + len(hunk.new_lines)
    return True


def _find_block(lines: list[str], block: tuple[str, ...], start: int) -> int:
    if not block:
        return start
    size = len(block)
    first = block[0]
    for index in range(start, len(lines) - size + 1):
        if lines[index] == first and tuple(lines[index : index + size]) == block:
            return index
    return -1


def run_drift(repo: gitcmd.Repo, patches: list[Patch], from_rev: str, to_rev: str, *, to_ref: str | None = None,
              layers: list[str] | None = None) -> DriftReport:
    """Walk TO's first-parent line from merge-base(FROM, TO); see the module docstring. `layers`:
    each patch's (release or overlay), when an overlay's patches follow the release's."""
    started = time.monotonic()
    from_commit = _require(repo, from_rev)
    to = gitcmd.commit_info(repo, _require(repo, to_rev))
    base = gitcmd.merge_base(repo, from_commit, to.id)
    if base is None:
        raise UpstreamError(f"{from_rev} and {to_rev} share no history", hint="is the upstream URL right?")
    evaluator = SeriesEvaluator(repo, patches)
    paths = evaluator.paths

    line = gitcmd.first_parent_line(repo, base, to.id)
    # When the base is not itself on TO's first-parent line (it came in through a merge), start
    # from the first-parent commit just before the walked line, whose files the diffs build on.
    start = gitcmd.commit_info(repo, line[0]).parent if line else to.id
    start = start or base

    at_from = evaluator.evaluate(gitcmd.paths_at(repo, from_commit, paths))
    at_base = evaluator.evaluate(gitcmd.paths_at(repo, base, paths))
    files = gitcmd.paths_at(repo, start, paths)
    current = evaluator.evaluate(files) if start != base else at_base
    start_info = gitcmd.commit_info(repo, start)
    # Per patch: (commit where its present stretch began, verdict there, previous commit, breaks)
    stretches = [_Stretch(start_info, v, None, 0) for v in current]

    history = gitcmd.path_history(repo, start, to.id, paths)
    for info, changes in history:
        for change in changes:
            if change.sha is None:
                files.pop(change.path, None)
            else:
                files[change.path] = gitcmd.Entry(change.mode, change.sha)
        verdicts = evaluator.evaluate(files)
        for stretch, verdict in zip(stretches, verdicts):
            stretch.advance(info, verdict)

    results = [
        _summarize(repo, patch, stretch, at_from[i].state, at_base[i].state)
        for i, (patch, stretch) in enumerate(zip(patches, stretches))
    ]
    for result, layer in zip(results, layers or ()):
        result.layer = layer
    release = [info for info, _ in gitcmd.path_history(repo, base, from_commit, paths)] if base != from_commit else []
    return DriftReport(
        from_commit=from_commit, to_ref=to_ref or to_rev, to=to, base=base, commits=len(line),
        candidates=len(history), patches=results, seconds=time.monotonic() - started,
        release_commits=release,
    )


@dataclass
class _Stretch:
    since: CommitInfo  # first commit of the current stretch of applying / not applying
    verdict: Verdict  # the verdict where the stretch began (the cause, for a break)
    tip: Verdict | None  # the latest verdict, when it differs in detail from `verdict`
    breaks: int

    def advance(self, info: CommitInfo, verdict: Verdict) -> None:
        was_ok = self.verdict.state == APPLIES
        if was_ok != (verdict.state == APPLIES):
            self.since, self.verdict, self.tip = info, verdict, None
            self.breaks += was_ok
        else:
            self.tip = verdict


def _summarize(repo: gitcmd.Repo, patch: Patch, stretch: _Stretch, at_from: str, at_base: str) -> PatchDrift:
    final = stretch.tip or stretch.verdict
    result = PatchDrift(patch.name, final.state, at_from, at_base, breaks=stretch.breaks)
    if final.state == APPLIES:
        return result
    first_bad = stretch.since
    result.first_bad = first_bad
    # breaks == 0: it has not applied anywhere on the walked line, so nothing was last good.
    result.last_good = gitcmd.commit_info(repo, first_bad.parent) if first_bad.parent and stretch.breaks else None
    cause = stretch.verdict
    result.file, result.hunk, result.reason = cause.file, cause.hunk, cause.reason
    if cause.state == BROKEN and cause.hunk is None and first_bad.parent and cause.file:
        # The whole file is missing: ask git's rename detection where it went.
        moved = gitcmd.renames_between(repo, first_bad.parent, first_bad.id, patch.paths).get(cause.file)
        if moved is not None:
            result.moved_to = moved.new_path
            result.deleted = moved.status == "D"
    return result


def _require(repo: gitcmd.Repo, rev: str) -> str:
    return gitcmd.require_commit(repo, rev, where="upstream", hint="fetch it into the mirror, or check --ref / --range")
