from __future__ import annotations

from pathlib import Path

from rocmpatch import store
from rocmpatch.operations import drift
from rocmpatch.commands import load_selected, patch_label
from rocmpatch.console import emit_json, note, out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.files import naming, refuse_unwritable_output
from rocmpatch.tables import Table


def run(*, upstream_url: str | None, series_dir: Path | None, ref: str | None, span: str | None, as_json: bool, markdown: Path | None,
        release: str | None = None, overlay: Path | None = None) -> ExitCode:
    if markdown is not None:
        refuse_unwritable_output(markdown, "--markdown")  # before the walk, which may take minutes
    loaded = load_selected(series_dir, release, overlay)
    lock = loaded.locked()
    start, end = _endpoints(lock.upstream.commit, ref, span)
    url = store.upstream_url(lock.upstream, upstream_url)
    repo, commits = store.history_repo(url, [start, end])
    report = drift.run_drift(repo, [p.patch for p in loaded.patches], commits[start], commits[end], to_ref=end,
                             layers=[p.layer for p in loaded.patches])
    if markdown is not None:
        with naming(markdown):
            markdown.write_text(to_markdown(report), encoding="utf-8")
    if as_json:
        emit_json(report.to_json())
    else:
        out.print(_table(report))
        note(_summary(report))
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED


def _endpoints(pin: str, ref: str | None, span: str | None) -> tuple[str, str]:
    if ref and span:
        raise UsageError("give --ref or --range, not both")
    if span is None:
        return pin, ref or "main"
    start, dots, end = span.partition("..")
    if not dots or not start or not end or end.startswith("."):
        raise UsageError(f"--range: expected A..B, got {span!r}", hint="for example --range core_v0.5.0..main")
    return start, end


def _summary(report: drift.DriftReport) -> str:
    where = "" if report.from_on_ref else (
        f"the pin {report.from_commit[:12]} is not on {report.to_ref}'s history (a release branch): "
        f"{len(report.release_commits)} release-branch commit(s) since the merge base touch the series; ")
    return (
        f"{where}walked {report.commits} commits on {report.to_ref}'s first-parent line from the merge base "
        f"{report.base[:12]} with {report.from_commit[:12]}; {report.candidates} touch the series; {report.seconds:.1f} s"
    )


def _commit(info) -> str:
    return f"{info.id[:12]} {info.date[:10]} {info.subject}" if info else "-"


def _where(item: drift.PatchDrift) -> str:
    if item.state == drift.APPLIES:
        return f"broke {item.breaks}x along the way, applies again" if item.breaks else ""
    if item.state == drift.OBSOLETE and not item.file:
        return "upstream already contains the change"
    place = item.file or ""
    if item.hunk:
        place += f" hunk {item.hunk}"
    if item.moved_to:
        return f"{place}: renamed to {item.moved_to}"
    if item.deleted:
        return f"{place}: deleted upstream"
    return f"{place}: {item.reason}" if item.reason else place


def _table(report: drift.DriftReport) -> Table:
    table = Table("patch", f"at {report.to_ref}", "first bad commit", "last good commit", "what no longer applies",
                  title=f"drift of the series to {report.to_ref} ({report.to.id[:12]})", show_lines=False,
                  whole=("patch", "first bad commit", "last good commit"))
    for item in report.patches:
        style = {drift.APPLIES: "green", drift.OBSOLETE: "yellow"}.get(item.state, "red")
        table.add_row(patch_label(item.name, item.layer), f"[{style}]{item.state}[/]", _commit(item.first_bad), _commit(item.last_good), _where(item))
    return table


def to_markdown(report: drift.DriftReport) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    verdict = "every patch applies" if report.ok else "some patches no longer apply"
    lines = [
        f"# Upstream drift: {verdict} at {report.to_ref} ({report.to.id[:12]}, {report.to.date[:10]})",
        "",
        _summary(report) + ".",
        "",
        "| patch | at tip | first bad commit | last good commit | what no longer applies |",
        "| --- | --- | --- | --- | --- |",
    ]
    for item in report.patches:
        lines.append(f"| {cell(patch_label(item.name, item.layer))} | {item.state} | {cell(_commit(item.first_bad))} | {cell(_commit(item.last_good))} | {cell(_where(item))} |")
    if report.release_commits:
        lines += ["", "Release-branch commits between the merge base and the pin that touch the series:", ""]
        lines += [f"- {cell(_commit(c))}" for c in report.release_commits]
    return "\n".join(lines) + "\n"
