"""`rocmpatch rebase --onto REF | --continue | --abort [--into NEW] [--report [--json]]`: the options
checked against each other, rocmpatch.operations.rebasing called, its outcome printed."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from rocmpatch.commands import load_selected, patch_label
from rocmpatch.console import emit_json, err, out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.operations import rebase, rebase_report, rebasing
from rocmpatch.operations.rebase_conflicts import RESOLVE_HINT
from rocmpatch.operations.rebase_state import Outcome
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
        return _report(rebasing.report(load_selected(series_dir, release, overlay), onto, upstream_url=upstream_url), onto, as_json)
    if abort:
        stopped, directory = rebasing.abort(series_dir, release)
        out.print(f"rebase of {stopped} aborted: removed {directory}; the series, the overlay and their locks are as they were", markup=False)
        return ExitCode.OK
    if resume:
        carried = rebasing.resume(series_dir, release, overlay)
    else:
        carried = rebasing.start(load_selected(series_dir, release, overlay), onto, upstream_url=upstream_url, into=into)
    result, loaded = carried.result, carried.loaded
    out.print(_table(result.outcomes))
    if isinstance(result, rebase.Stopped):
        _explain(result, loaded.location.release)
        return ExitCode.PATCH_CONFLICT
    written = rebasing.write(loaded, result)
    out.print(f"{written.release}: the series now applies to {result.onto_ref} ({result.onto[:12]}); "
              f"patch files in {written.series_dir} and its entry in {written.lock_path.name} written", markup=False)
    if loaded.overlay is not None:
        out.print(f"the overlay {loaded.overlay.directory}: its patch files and overlay.lock written, on {written.release}", markup=False)
    return ExitCode.OK


def _report(found: rebase_report.RebaseReport, onto: str, as_json: bool) -> ExitCode:
    """Exit 0 whatever the patches do: conflicts are the report's answer, not the command's failure."""
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


def _table(outcomes: list[Outcome]) -> Table:
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
