"""Which release a command works on: asked for, detected from the target, or the default.

- `--release NAME` (or ROCMPATCH_RELEASE) names a folder in patchsets/;
- an existing target says which release it is: its history sits on one release's pinned commit
  (the base below the rocmpatch commits, or an ancestor of HEAD when the user committed on top),
  so apply, verify, status, unapply and smoke never need the flag, and a flag that disagrees with
  the target is refused;
- an overlay (`--overlay DIR`) names the release its overlay.lock was written for: that release,
  unless --release or the target says otherwise (refused: the overlay's patches were locked on
  that release's tree; `rocmpatch lock --overlay DIR --release NAME` moves it);
- otherwise (a new target, fetch, drift, ...) the default release: the one whose release.yaml says
  `default: true` (exactly one must, when there are several), and the command says so.
A release is data (a folder and a lock entry); nothing here knows any release by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput, UsageError
from rocmpatch.series import Location, Patchsets, find_patchsets

RELEASE_VARIABLE = "ROCMPATCH_RELEASE"

ASKED, DETECTED, DEFAULT, ONLY, OVERLAY = "asked", "detected", "default", "only", "overlay"


@dataclass(frozen=True)
class Choice:
    location: Location
    how: str  # asked | detected | default | only | overlay
    detail: str = ""  # for detected and overlay: what said so

    @property
    def release(self) -> str:
        return self.location.release

    def describe(self) -> str:
        """One line for stderr, or '' when the user named the release."""
        if self.how == DEFAULT:
            return f"release {self.release}: the default (--release NAME to choose another)"
        if self.how in (DETECTED, OVERLAY):
            return f"release {self.release}: {self.detail}"
        return ""


def choose(series_dir: Path | None, requested: str | None, *, target: Path | None = None,
           overlay: tuple[str, Path] | None = None) -> Choice:
    """The release to use, given --series-dir, --release, (for commands on a checkout) the target,
    and an overlay's locked release (release, its overlay.lock)."""
    patchsets, named_by_dir = find_patchsets(series_dir)
    requested = _asked(requested, named_by_dir)
    available = patchsets.releases()
    if requested is not None and requested not in available:
        raise UsageError(f"no release {requested!r} in {patchsets.root}", hint=_listing(available))
    how, detail = ASKED, ""
    if overlay is not None:
        release, lock_path = overlay
        if requested is not None and requested != release:
            raise UsageError(f"{lock_path} is locked for release {release}, not {requested}",
                             hint=f"drop --release (the overlay's release is used), or move the overlay: 'rocmpatch lock --overlay {lock_path.parent} --release {requested}'")
        if release not in available:
            raise UsageError(f"{lock_path} is locked for release {release}, which is not in {patchsets.root}",
                             hint=f"{_listing(available)}; move the overlay with 'rocmpatch lock --overlay {lock_path.parent} --release NAME' (or rebase it)")
        if requested is None:
            requested, how, detail = release, OVERLAY, f"the release {lock_path} is locked for"
    detected = detect(patchsets, target) if target is not None else None
    if detected is not None:
        release, target_detail = detected
        if requested is not None and requested != release:
            drop = "the overlay is for another release" if how == OVERLAY else "drop --release (the target's release is used)"
            raise UsageError(f"{target_detail}, so it is release {release}, not {requested}", hint=f"{drop}, or give another --target")
        return Choice(patchsets.location(release), how if requested else DETECTED, detail if how == OVERLAY else target_detail)
    if requested is not None:
        return Choice(patchsets.location(requested), how, detail)
    return _default(patchsets, available)


def every(series_dir: Path | None, requested: str | None) -> list[Location]:
    """The releases a project-wide command (check, lock) covers: the one asked for, else all."""
    patchsets, named_by_dir = find_patchsets(series_dir)
    if _asked(requested, named_by_dir):
        return [choose(series_dir, requested).location]
    return [patchsets.location(name) for name in _folders(patchsets)]


def _asked(requested: str | None, named_by_dir: str | None) -> str | None:
    """--release (or ROCMPATCH_RELEASE), or the release whose folder --series-dir names; both must agree."""
    asked = requested or os.environ.get(RELEASE_VARIABLE) or None
    if asked and named_by_dir and asked != named_by_dir:
        raise UsageError(f"--series-dir names release {named_by_dir}, --release says {asked}", hint="give one of them")
    return asked or named_by_dir


def _folders(patchsets: Patchsets) -> list[str]:
    available = patchsets.releases()
    if not available:
        raise InvalidInput(patchsets.root, "holds no release folder with a series.yaml", hint="see docs/adding-a-release.md")
    return available


def _default(patchsets: Patchsets, available: list[str]) -> Choice:
    available = available or _folders(patchsets)
    if len(available) == 1:
        return Choice(patchsets.location(available[0]), ONLY)
    locations = [patchsets.location(name) for name in available]
    return Choice(default_location(patchsets, locations), DEFAULT)


def default_location(patchsets: Patchsets, locations: list[Location]) -> Location:
    """The one of several releases whose release.yaml says `default: true`; none or two is an error."""
    defaults = [location for location in locations if location.info.default]
    if len(defaults) > 1:
        first, second = defaults[0].info, defaults[1].info
        raise first.node.error(f"true here and in {second.path}:{second.node.line_of('default')}; "
                               "exactly one release is the default", key="default",
                               hint="remove 'default: true' from all but one release.yaml")
    if not defaults:
        raise InvalidInput(patchsets.root, f"holds several releases ({', '.join(l.release for l in locations)}) "
                                           "and no release.yaml says 'default: true'",
                           hint="add 'default: true' to the release.yaml of the release a new checkout should get, "
                                "or give --release NAME")
    return defaults[0]


def detect(patchsets: Patchsets, target: Path) -> tuple[str, str] | None:
    """(release, why) for an existing git checkout based on one release's pin; None for a new target,
    or one based on no pinned commit (the command itself then says what it is based on)."""
    from rocmpatch import gitcmd, history

    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        return None
    if not (target / ".git").exists():
        return None  # not a checkout: the command itself says so with its own message
    lock_file = patchsets.lock_file()
    if lock_file is None:
        return None
    pins = {lock.upstream.commit: name for name, lock in lock_file.releases.items()}
    repo = gitcmd.open_repo(target)
    state = history.read(repo)
    if state.base in pins:
        count = len(state.applied)
        return pins[state.base], f"{target} is based on its pin {state.base[:12]} with {count} patch(es) applied"
    if state.head is None:
        return None
    for commit, name in pins.items():
        if gitcmd.has_object(repo, commit) and gitcmd.is_ancestor(repo, commit, state.head):
            return name, f"{target}'s HEAD descends from its pin {commit[:12]}"
    return None


def _listing(available: list[str]) -> str:
    return f"releases here: {', '.join(available)}" if available else "no release folder found"


@dataclass(frozen=True)
class ReleaseSummary:
    name: str
    ref: str | None
    commit: str | None
    date: str | None
    patches: int
    validated: tuple  # schema.Validation records
    default: bool

    def to_json(self) -> dict:
        return {
            "name": self.name, "ref": self.ref, "commit": self.commit, "date": self.date, "patches": self.patches,
            "default": self.default,
            "validated": [{"platform": v.platform, "date": v.date, "hardware": v.hardware, "what": v.what} for v in self.validated],
        }


def release_summaries(patchsets: Patchsets) -> list[ReleaseSummary]:
    """Each release folder with its lock entry (if any), whether it is the default, and its
    release.yaml validation records."""
    from rocmpatch.schema import load_series

    lock_file = patchsets.lock_file()
    pinned = lock_file.releases if lock_file else {}
    locations = [patchsets.location(name) for name in patchsets.releases()]
    default = locations[0] if len(locations) == 1 else default_location(patchsets, locations) if locations else None
    summaries = []
    for location in locations:
        lock = pinned.get(location.release)
        up = lock.upstream if lock else None
        summaries.append(ReleaseSummary(
            location.release, up.ref if up else None, up.commit if up else None, up.date if up else None,
            len(load_series(location.series_dir).entries), location.info.validated, location == default,
        ))
    return sorted(summaries, key=lambda s: (s.date or "", s.name))
