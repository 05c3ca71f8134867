from __future__ import annotations

from pathlib import Path

from rocmpatch import checking, series
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode


def run(*, upstream_url: str | None, series_dir: Path | None, as_json: bool) -> ExitCode:
    loaded = series.load(series.locate(series_dir))
    report = checking.check(loaded, url_override=upstream_url)
    if as_json:
        emit_json(report.to_json())
    else:
        for item in report.patches:
            mark = "ok  " if item.ok else "FAIL"
            out.print(f"{mark} {item.name:<32} {item.error or ', '.join(item.files)}", markup=False)
        for problem in report.lock_problems:
            out.print(f"FAIL lock: {problem}", markup=False)
        if report.patched_tree != report.expected_tree and report.patched_tree:
            out.print(f"FAIL patched tree {report.patched_tree} != upstream.lock patched_tree {report.expected_tree}", markup=False)
        out.print("the series applies exactly" if report.ok else "the series does NOT apply cleanly", markup=False)
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED
