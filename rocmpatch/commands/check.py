from __future__ import annotations

from pathlib import Path

from rocmpatch import series
from rocmpatch.commands import load_selected
from rocmpatch.operations import checking
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.releases import every
from rocmpatch.series import OVERLAY


def run(*, upstream_url: str | None, series_dir: Path | None, as_json: bool, release: str | None = None, overlay: Path | None = None) -> ExitCode:
    """Every release (or the one asked for; with an overlay, its release and the overlay): each
    patch applies exactly and the result matches the lock."""
    if overlay is not None:
        stacks = [load_selected(series_dir, release, overlay)]
    else:
        stacks = [series.load(location) for location in every(series_dir, release)]
    reports = {loaded.location.release: checking.check(loaded, url_override=upstream_url) for loaded in stacks}
    ok = all(report.ok for report in reports.values())
    if as_json:
        emit_json({"ok": ok, "releases": {name: report.to_json() for name, report in reports.items()}})
        return ExitCode.OK if ok else ExitCode.CHECK_FAILED
    for name, report in reports.items():
        out.print(f"{name} ({report.commit[:12]}):", markup=False)
        for index, item in enumerate(report.patches):
            if item.layer == OVERLAY and (index == 0 or report.patches[index - 1].layer != OVERLAY):
                out.print(f"  overlay {overlay}:", markup=False)
            mark = "ok  " if item.ok else "FAIL"
            out.print(f"  {mark} {item.name:<32} {item.error or ', '.join(item.files)}", markup=False)
        for problem in report.lock_problems:
            out.print(f"  FAIL lock: {problem}", markup=False)
        lock_name = "overlay.lock" if overlay is not None else "upstream.lock"
        if report.patched_tree != report.expected_tree and report.patched_tree and report.expected_tree:
            out.print(f"  FAIL patched tree {report.patched_tree} != {lock_name} patched_tree {report.expected_tree}", markup=False)
        what = f"{name} + the overlay" if overlay is not None else name
        out.print(f"  {what}: " + ("the series applies exactly" if report.ok else "the series does NOT apply cleanly"), markup=False)
    return ExitCode.OK if ok else ExitCode.CHECK_FAILED
