from __future__ import annotations

from pathlib import Path

from rocmpatch import series
from rocmpatch.operations import checking
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.releases import every


def run(*, upstream_url: str | None, series_dir: Path | None, as_json: bool, release: str | None = None) -> ExitCode:
    """Every release (or the one asked for): each patch applies exactly and the result matches the lock."""
    reports = {}
    for location in every(series_dir, release):
        reports[location.release] = checking.check(series.load(location), url_override=upstream_url)
    ok = all(report.ok for report in reports.values())
    if as_json:
        emit_json({"ok": ok, "releases": {name: report.to_json() for name, report in reports.items()}})
        return ExitCode.OK if ok else ExitCode.CHECK_FAILED
    for name, report in reports.items():
        out.print(f"{name} ({report.commit[:12]}):", markup=False)
        for item in report.patches:
            mark = "ok  " if item.ok else "FAIL"
            out.print(f"  {mark} {item.name:<32} {item.error or ', '.join(item.files)}", markup=False)
        for problem in report.lock_problems:
            out.print(f"  FAIL lock: {problem}", markup=False)
        if report.patched_tree != report.expected_tree and report.patched_tree:
            out.print(f"  FAIL patched tree {report.patched_tree} != upstream.lock patched_tree {report.expected_tree}", markup=False)
        out.print(f"  {name}: " + ("the series applies exactly" if report.ok else "the series does NOT apply cleanly"), markup=False)
    return ExitCode.OK if ok else ExitCode.CHECK_FAILED
