from __future__ import annotations

from pathlib import Path

import yaml
from rich.table import Table

from rocmpatch import locking, rebase, series, store
from rocmpatch.console import err, out
from rocmpatch.errors import CheckFailed, ExitCode, UsageError
from rocmpatch.files import replace_file
from rocmpatch.schema import SERIES_FILE, YAML_LOADER, Series


def run(*, onto: str | None, resume: bool, abort: bool, upstream_url: str | None, series_dir: Path | None) -> ExitCode:
    location = series.locate(series_dir)
    project = location.lock_path.parent
    if [bool(onto), resume, abort].count(True) != 1:
        raise UsageError("rocmpatch rebase: give exactly one of --onto REF, --continue or --abort")
    if abort:
        directory = rebase.abort(project)
        out.print(f"rebase aborted: removed {directory}; the series and upstream.lock are as they were", markup=False)
        return ExitCode.OK
    loaded = series.load(location)
    items = [rebase.SeriesPatch(p.name, p.entry.file, p.text) for p in loaded.patches]
    if resume:
        result = rebase.resume(project, items)
    else:
        lock = loaded.locked()
        url = store.upstream_url(lock.upstream, upstream_url)
        repo, commits = store.history_repo(url, [lock.upstream.commit, onto])
        result = rebase.start(project, repo, lock.upstream.commit, commits[onto], onto, items, url=url)
    out.print(_table(result.outcomes))
    if isinstance(result, rebase.Stopped):
        _explain(result)
        return ExitCode.PATCH_CONFLICT
    write_results(loaded, result)
    rebase.finish(project)
    out.print(f"the series now applies to {result.onto_ref} ({result.onto[:12]}); patch files and upstream.lock rewritten", markup=False)
    return ExitCode.OK


def _table(outcomes: list[rebase.Outcome]) -> Table:
    table = Table(title="rebase")
    for column in ("patch", "result", "conflicts"):
        table.add_column(column)
    styles = {rebase.CLEAN: "green", rebase.MERGED: "cyan", rebase.RESOLVED: "cyan", rebase.OBSOLETE: "yellow", rebase.CONFLICT: "red"}
    for item in outcomes:
        table.add_row(item.name, f"[{styles[item.result]}]{item.result}[/]", ", ".join(item.files))
    return table


def _explain(stopped: rebase.Stopped) -> None:
    err.print(f"patch {stopped.patch} conflicts in: {', '.join(stopped.files)}", markup=False)
    err.print(f"  resolve the conflict markers in {stopped.worktree} (git diff HEAD there shows the patch so far),", markup=False)
    err.print("  then run 'rocmpatch rebase --continue'; or 'rocmpatch rebase --abort' to change nothing.", markup=False)


def write_results(loaded: series.LoadedSeries, finished: rebase.Finished) -> None:
    """Write the refreshed patches, drop obsolete ones, and pin the new commit in upstream.lock.

    The lock is computed (the refreshed series applied exactly to the new commit) before any file
    is written, so a failure here leaves the project as it was."""
    kept = [
        series.loaded_patch(patch.entry, text.encode("utf-8", "surrogateescape"), patch.path)
        for patch in loaded.patches
        if (text := finished.texts[patch.name]) is not None
    ]
    new_series = Series(loaded.series.directory, tuple(p.entry for p in kept))
    new_loaded = series.LoadedSeries(loaded.location, new_series, tuple(kept), loaded.lock)
    new_lock = locking.compute(new_loaded, locking.Pin(ref=finished.onto_ref, commit=finished.onto), url_override=finished.url)
    if new_lock.patched_tree != finished.tree:
        raise CheckFailed(f"the refreshed series gives tree {new_lock.patched_tree}, the rebase made {finished.tree}", hint="nothing was written; please report this")
    dropped = [p for p in loaded.patches if finished.texts[p.name] is None]
    series_path = loaded.series.directory / SERIES_FILE
    series_text = without_entries(series_path.read_text(encoding="utf-8"), {p.name for p in dropped})
    for patch in kept:
        replace_file(patch.path, patch.text.encode("utf-8", "surrogateescape"))
    if dropped:
        replace_file(series_path, series_text.encode("utf-8"))
        for patch in dropped:
            patch.path.unlink()
    locking.write(loaded.location.lock_path, new_lock)


def without_entries(text: str, names: set[str]) -> str:
    """series.yaml with the entries named `names` cut out, everything else (comments too) kept."""
    if not names:
        return text
    root = yaml.compose(text, Loader=YAML_LOADER)
    items = dict((k.value, v) for k, v in root.value)["series"].value
    lines = text.splitlines(keepends=True)
    cut: set[int] = set()
    for index, item in enumerate(items):
        name = dict((k.value, v.value) for k, v in item.value).get("name")
        if name in names:
            end = items[index + 1].start_mark.line if index + 1 < len(items) else item.end_mark.line + (item.end_mark.column > 0)
            cut.update(range(item.start_mark.line, end))
    return "".join(line for number, line in enumerate(lines) if number not in cut)
