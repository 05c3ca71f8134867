"""`rocmpatch rebase`, the use case: which release a stopped rebase is (or a new one starts from), the
upstream history it needs, and the results written once every patch is through. The carry itself is
rebase.py; its state between runs rebase_state.py; the files written rebase_results.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmpatch import series, store
from rocmpatch.errors import UsageError
from rocmpatch.operations import rebase, rebase_report, rebase_results, rebase_state
from rocmpatch.schema import is_release_name
from rocmpatch.series import LoadedSeries, Location


@dataclass
class Carried:
    """The release (with its overlay) a rebase carries, and how far it got."""

    loaded: LoadedSeries
    result: rebase.Finished | rebase.Stopped


def start(loaded: LoadedSeries, onto: str, *, upstream_url: str | None = None, into: str | None = None) -> Carried:
    """Carry `loaded` onto the upstream commit `onto` names, until a patch conflicts (a new release
    with `into`: refused here when that is no valid name or exists already)."""
    if into:
        _check_new_release(loaded.location.patchsets, into)
    lock = loaded.locked()
    url = store.upstream_url(lock.upstream, upstream_url)
    repo, commits = store.history_repo(url, [lock.upstream.commit, onto])
    result = rebase.start(_project(loaded), loaded.location.release, repo, lock.upstream.commit, commits[onto], onto, list(loaded.patches),
                          url=url, into=into, overlay=loaded.overlay.directory if loaded.overlay else None)
    return Carried(loaded, result)


def resume(series_dir: Path | None, release: str | None, overlay: Path | None) -> Carried:
    """Go on with the stopped rebase (of `release`, or the only one stopped), with the overlay it carries."""
    patchsets, named = series.find_patchsets(series_dir)
    project = patchsets.lock_path.parent
    location = patchsets.location(stopped_release(project, patchsets, release or named))
    loaded = series.load(location, overlay=_stopped_overlay(project, location.release, overlay))
    return Carried(loaded, rebase.resume(project, location.release, list(loaded.patches)))


def write(loaded: LoadedSeries, finished: rebase.Finished) -> Location:
    """A rebase that went through, written into the project (rebase_results), its state removed;
    where the series now is: the release's folder, or --into's new one."""
    written = rebase_results.write_results(loaded, finished)
    rebase.finish(_project(loaded), loaded.location.release)
    return written


def abort(series_dir: Path | None, release: str | None) -> tuple[str, Path]:
    """The stopped rebase given up: its release and the directory removed."""
    patchsets, named = series.find_patchsets(series_dir)
    project = patchsets.lock_path.parent
    stopped = stopped_release(project, patchsets, release or named)
    return stopped, rebase.abort(project, stopped)


def report(loaded: LoadedSeries, onto: str, *, upstream_url: str | None = None) -> rebase_report.RebaseReport:
    """Every patch tried onto `onto` without stopping; nothing is written."""
    lock = loaded.locked()
    repo, commits = store.history_repo(store.upstream_url(lock.upstream, upstream_url), [lock.upstream.commit, onto])
    return rebase_report.report(repo, loaded.location.release, lock.upstream.commit, commits[onto], onto, list(loaded.patches))


def _project(loaded: LoadedSeries) -> Path:
    return loaded.location.patchsets.lock_path.parent


def _stopped_overlay(project: Path, release: str, given: Path | None) -> series.LoadedOverlay | None:
    """The overlay the stopped rebase carries (it goes on with the same one; another is refused)."""
    carried = rebase_state.stopped_overlay(project, release)
    if given is not None and (carried is None or given.expanduser().absolute() != carried):
        raise UsageError(f"the stopped rebase of {release} carries {'the overlay ' + str(carried) if carried else 'no overlay'}, not {given}",
                         hint="go on with the overlay it started with (drop --overlay), or 'rocmpatch rebase --abort' and start again")
    return series.load_overlay(carried) if carried is not None else None


def _check_new_release(patchsets: series.Patchsets, into: str) -> None:
    if not is_release_name(into):
        raise UsageError(f"--into: {into!r} is not a valid release name", hint="a folder name such as core_v0.20.0")
    folder = patchsets.location(into).series_dir
    if folder.exists():
        raise UsageError(f"--into: {folder} already exists", hint="choose a new release name, or rebase that release itself with --release")


def stopped_release(project: Path, patchsets: series.Patchsets, asked: str | None) -> str:
    """`asked`, else the one release with a stopped rebase."""
    stopped = rebase_state.in_progress(project, patchsets.releases())
    if asked:
        return asked
    if len(stopped) == 1:
        return stopped[0]
    if not stopped:
        raise rebase_state.not_started()
    raise UsageError(f"rebases of {', '.join(stopped)} are in progress", hint="say which with --release NAME")
