from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from rocmpatch import series, store
from rocmpatch.operations import rebase, rebase_report, rebase_results
from rocmpatch.operations.rebase_conflicts import RESOLVE_HINT
from rocmpatch.commands import load_selected, patch_label
from rocmpatch.console import emit_json, err, out
from rocmpatch.errors import ExitCode, TargetRefused, UsageError
from rocmpatch.schema import is_release_name
from rocmpatch.tables import Table


def run(*, onto: str | None, resume: bool, abort: bool, upstream_url: str | None, series_dir: Path | None,
        release: str | None = None, into: str | None = None, overlay: Path | None = None,
        report: bool = False, as_json: bool = False) -> ExitCode:
    if [bool(onto), resume, abort].count(True) != 1:
        raise UsageError("rocmpatch rebase: give exactly one of --onto REF, --continue or --abort")
    if into and not onto:
        raise UsageError("--into NEW_RELEASE goes with --onto REF (a stopped rebase remembers it)")
    if report and (not onto or into):
        raise UsageError("--report goes with --onto REF, without --into (it writes nothing)")
    if as_json and not report:
        raise UsageError("--json goes with --report", hint="rocmpatch rebase --onto REF --report --json")
    if report:
        return _report(onto, upstream_url, series_dir, release, overlay, as_json)
    patchsets, named = series.find_patchsets(series_dir)
    project = patchsets.lock_path.parent
    if onto:
        loaded = load_selected(series_dir, release, overlay)
        location = loaded.location
        if into:
            _check_new_release(patchsets, into)
    else:
        location = patchsets.location(_stopped_release(project, patchsets, release or named))
    if abort:
        directory = rebase.abort(project, location.release)
        out.print(f"rebase of {location.release} aborted: removed {directory}; the series, the overlay and their locks are as they were", markup=False)
        return ExitCode.OK
    if resume:
        loaded = series.load(location, overlay=_stopped_overlay(project, location.release, overlay))
        result = rebase.resume(project, location.release, list(loaded.patches))
    else:
        lock = loaded.locked()
        url = store.upstream_url(lock.upstream, upstream_url)
        repo, commits = store.history_repo(url, [lock.upstream.commit, onto])
        result = rebase.start(project, location.release, repo, lock.upstream.commit, commits[onto], onto, list(loaded.patches), url=url, into=into,
                              overlay=loaded.overlay.directory if loaded.overlay else None)
    out.print(_table(result.outcomes))
    if isinstance(result, rebase.Stopped):
        _explain(result, location.release)
        return ExitCode.PATCH_CONFLICT
    written = rebase_results.write_results(loaded, result)
    rebase.finish(project, location.release)
    out.print(f"{written.release}: the series now applies to {result.onto_ref} ({result.onto[:12]}); "
              f"patch files in {written.series_dir} and its entry in {written.lock_path.name} written", markup=False)
    if loaded.overlay is not None:
        out.print(f"the overlay {loaded.overlay.directory}: its patch files and overlay.lock written, on {written.release}", markup=False)
    return ExitCode.OK


def _report(onto: str, upstream_url: str | None, series_dir: Path | None, release: str | None, overlay: Path | None, as_json: bool) -> ExitCode:
    """Exit 0 whatever the patches do: conflicts are the report's answer, not the command's failure."""
    loaded = load_selected(series_dir, release, overlay)
    lock = loaded.locked()
    repo, commits = store.history_repo(store.upstream_url(lock.upstream, upstream_url), [lock.upstream.commit, onto])
    found = rebase_report.report(repo, loaded.location.release, lock.upstream.commit, commits[onto], onto, list(loaded.patches))
    if as_json:
        emit_json(found.to_json())
        return ExitCode.OK
    table = Table("patch", "result", "conflicts", title=f"{found.release} onto {onto} ({found.onto[:12]})", whole=("patch", "conflicts"))
    styles = {rebase_report.EXACT: "green", rebase_report.THREE_WAY: "cyan", rebase_report.CONFLICT: "red"}
    for item in found.patches:
        result = f"[{styles[item.result]}]{item.result}[/]" + (" (upstream has it)" if item.upstream_has_it else "")
        table.add_row(escape(patch_label(item.name, item.layer)), result, escape("\n".join(f"{c.path} ({c.kind})" for c in item.conflicts)))
    out.print(table)
    totals = found.totals
    out.print(f"{len(found.patches)} patches: {totals['exact']} exact, {totals['3-way']} 3-way, {totals['conflict']} conflict; "
              f"{found.seconds:.1f} s. Nothing was written.", markup=False)
    if totals["conflict"]:
        out.print("After a conflict, the next patches were tried with that patch's cleanly merged files kept and its "
                  "conflicted files as upstream has them ('carried' in --json).", markup=False)
    return ExitCode.OK


def _stopped_overlay(project: Path, release: str, given: Path | None) -> series.LoadedOverlay | None:
    """The overlay the stopped rebase carries (it goes on with the same one; another is refused)."""
    carried = rebase.stopped_overlay(project, release)
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


def _stopped_release(project: Path, patchsets: series.Patchsets, asked: str | None) -> str:
    stopped = rebase.in_progress(project, patchsets.releases())
    if asked:
        return asked
    if len(stopped) == 1:
        return stopped[0]
    if not stopped:
        raise TargetRefused("no rebase in progress", hint="start one with 'rocmpatch rebase --onto REF'")
    raise UsageError(f"rebases of {', '.join(stopped)} are in progress", hint="say which with --release NAME")


def _table(outcomes: list[rebase.Outcome]) -> Table:
    table = Table("patch", "result", "conflicts", title="rebase", whole=("patch", "conflicts"))
    styles = {rebase.CLEAN: "green", rebase.MERGED: "cyan", rebase.RESOLVED: "cyan", rebase.OBSOLETE: "yellow", rebase.CONFLICT: "red"}
    for item in outcomes:
        table.add_row(item.name, f"[{styles[item.result]}]{item.result}[/]", ", ".join(item.files))
    return table


def _explain(stopped: rebase.Stopped, release: str) -> None:
    err.print(f"patch {stopped.patch} conflicts in: {', '.join(f'{c.path} ({c.kind})' for c in stopped.conflicts)}", markup=False)
    err.print(f"  the worktree: {stopped.worktree} ('git status' there names each conflict, 'git diff HEAD' shows the patch so far);", markup=False)
    err.print(f"  {RESOLVE_HINT}; or 'rocmpatch rebase --abort' to change nothing"
              f" (add --release {release} while another release's rebase is also stopped).", markup=False)
