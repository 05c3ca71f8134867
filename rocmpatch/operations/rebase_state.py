"""What a stopped rebase keeps between `rebase --onto` and `--continue` / `--abort`: a directory per
release (`.git/rocmpatch-rebase-<release>/` of the project, or `.rocmpatch-rebase-<release>/` outside
git, so rebases of two releases can be stopped at once) holding state.json.

state.json is JSON that rocmpatch writes (a path or a patch name may hold any character; JSON keeps
them all) and reads back through yamlio's readers, declared once below: a state that is not one
rocmpatch wrote is refused in one line naming the file and the key, nothing else checks it by hand.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rocmpatch import gitcmd
from rocmpatch import yamlio as y
from rocmpatch.errors import InvalidInput, RocmpatchError, TargetRefused, shown
from rocmpatch.files import MAX_TEXT_FILE, read_regular_file, replace_file
from rocmpatch.operations.rebase_conflicts import Conflict

STATE_NAME = "rocmpatch-rebase"
STATE_FILE = "state.json"


@dataclass
class Outcome:
    name: str
    result: str  # rebase.CLEAN, MERGED, CONFLICT (stopped here), RESOLVED or OBSOLETE
    files: list[str] = field(default_factory=list)  # the conflicted files


@dataclass
class State:
    """What a stopped rebase needs to go on; saved as state.json."""

    onto: str
    onto_ref: str
    url: str  # where the upstream came from (written into nothing; the new lock keeps its url)
    into: str | None  # the new release the result is written as; None: rewrite the release itself
    source_objects: str  # the upstream object directory the scratch repository borrows
    series_sha256: dict[str, str]  # patch file -> sha256 when the rebase began (edits are refused)
    originals: list[str]  # ORIG(i) commits, i = 1..n, in the scratch repository
    tip: str  # NEW(done)
    rebased: list[str | None] = field(default_factory=list)  # per finished patch: its commit, or None if dropped
    outcomes: list[Outcome] = field(default_factory=list)
    overlay: str | None = None  # the overlay folder whose patches follow the release's, if any
    conflicts: list[Conflict] = field(default_factory=list)  # at a stop: each conflicted path, to be resolved

    @property
    def done(self) -> int:
        return len(self.rebased)


_COMMIT = y.Text("a commit id", non_empty=True)
_WORD = y.Text("a name or path", non_empty=True)
_OUTCOME = y.Mapping({"name": _WORD, "result": _WORD, "files": y.Optional(y.ListOf(_WORD, "a list of paths"), ())})
_CONFLICT = y.Mapping({"path": _WORD, "kind": _WORD, "left": y.Optional(y.Text("a blob id", non_empty=True))})
_STATE = y.Mapping({
    "onto": _COMMIT, "onto_ref": _WORD, "url": y.Text("the upstream's URL"), "into": y.Optional(_WORD), "source_objects": _WORD,
    "series_sha256": y.MappingOf(y.String("a patch file"), y.Text("a sha256", non_empty=True), "a map of patch file -> sha256"),
    "originals": y.ListOf(_COMMIT, "a list of commits"), "tip": _COMMIT,
    "rebased": y.ListOf(y.Optional(_COMMIT), "a list of commits (null: dropped)"),
    "outcomes": y.ListOf(_OUTCOME, "a non-empty list of outcomes", non_empty=True),
    "overlay": y.Optional(_WORD),
    # A state.json from before conflicts were recorded has none: --continue checks the markers.
    "conflicts": y.Optional(y.ListOf(_CONFLICT, "a list of conflicts"), ()),
})


def state_dir(project: Path, release: str) -> Path:
    """Inside the project's .git when the project is a git checkout (never committed by accident)."""
    name = f"{STATE_NAME}-{release}"
    try:
        return Path(gitcmd.run(project, "rev-parse", "--path-format=absolute", "--git-path", name))
    except RocmpatchError:  # not a git checkout
        return project / f".{name}"


def in_progress(project: Path, releases: list[str]) -> list[str]:
    """Those of `releases` with a stopped rebase."""
    return [r for r in releases if (state_dir(project, r) / STATE_FILE).is_file()]


def save(directory: Path, state: State) -> None:
    replace_file(directory / STATE_FILE, json.dumps(asdict(state), indent=2).encode("utf-8"))


def load(project: Path, release: str) -> tuple[Path, State]:
    """The stopped rebase of `release`: its directory and state; TargetRefused when none is stopped."""
    directory = state_dir(project, release)
    path = directory / STATE_FILE
    if not path.is_file():
        raise not_started()
    try:
        data = json.loads(read_regular_file(path, limit=MAX_TEXT_FILE, what="rebase state"))
        record = _STATE.read(y.plain_document(path, data))
    except ValueError as exc:  # not UTF-8, not JSON
        raise _not_ours(path, f"{type(exc).__name__}: {exc}") from None
    except InvalidInput as exc:  # against the schema: "PATH: KEY: problem"
        raise _not_ours(path, exc.message.removeprefix(f"{shown(path)}: ")) from None
    state = State(**{**record, "series_sha256": dict(record["series_sha256"]),
                     "outcomes": [Outcome(o["name"], o["result"], list(o["files"])) for o in record["outcomes"]],
                     "conflicts": [Conflict(c["path"], c["kind"], c["left"]) for c in record["conflicts"]]})
    return directory, state


def not_started() -> TargetRefused:
    return TargetRefused("no rebase in progress", hint="start one with 'rocmpatch rebase --onto REF'")


def _not_ours(path: Path, detail: str) -> InvalidInput:
    return InvalidInput(path, f"not a rebase state rocmpatch wrote ({detail})",
                        hint="run 'rocmpatch rebase --abort' (the series and upstream.lock are as they were), then start again")


def stopped_overlay(project: Path, release: str) -> Path | None:
    """The overlay folder a stopped rebase of `release` carries, if any."""
    overlay = load(project, release)[1].overlay
    return Path(overlay) if overlay else None
