"""`rocmpatch verify --installed [--python PY]`: the megatron package PY imports, against the
patched tree of a pinned release (the one asked for, the overlay's, else each pinned release)."""

from __future__ import annotations

from pathlib import Path

from rocmpatch import installed, series
from rocmpatch.commands import LISTED, difference_line, load_selected
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.operations import verifying_installed
from rocmpatch.releases import every

NOT_COMPARED = ("not compared: __pycache__ directories and compiled extension modules (built from the tree's sources; "
                "one that would be imported instead of a module of the tree is a difference)")
BYTECODE_HINT = "--strict also proves that the bytecode Python would load (__pycache__/*.pyc) is each module's own source compiled"


def run(*, python: str | None, series_dir: Path | None, release: str | None, overlay: Path | None, as_json: bool,
        upstream_url: str | None, strict: bool = False) -> ExitCode:
    if overlay is not None or release is not None:
        candidates = [load_selected(series_dir, release, overlay)]
    else:
        candidates = [series.load(location) for location in every(series_dir, None)]
    report = verifying_installed.verify_installed(candidates, python or installed.default_python(), url_override=upstream_url, strict=strict)
    if as_json:
        emit_json(report.to_json())
        return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED
    where = f"{report.python} (Python {report.version}, {report.executable})"
    if not report.found:
        out.print(f"{where} imports no megatron package of the tree" + (f" (found: {', '.join(report.others)})" if report.others else ""), markup=False)
        for difference in report.differences[:LISTED]:
            out.print(difference_line(difference), markup=False)
        out.print("install the patched tree first: 'rocmpatch apply --target ./Megatron-LM' then 'pip install ./Megatron-LM' (docs/install.md)", markup=False)
        return ExitCode.CHECK_FAILED
    out.print(f"{where} imports:", markup=False)
    for part in report.parts:
        how = "checkout" if part.checkout else "installed copy"
        out.print(f"  {part.prefix:<20} {part.path}  ({how}, {part.files} files)", markup=False)
    for other in report.others:
        out.print(f"  (not of the tree, not compared) {other}", markup=False)
    for problem in report.lock_problems:
        out.print(f"lock: {problem}", markup=False)
    for difference in report.differences[:LISTED]:
        out.print(difference_line(difference), markup=False)
    if len(report.differences) > LISTED:
        out.print(f"{len(report.differences)} path(s) differ; the first {LISTED} are above, --json lists every one", markup=False)
    left_out = [f"{report.pycache} __pycache__ dir(s)" + (" (their bytecode checked)" if report.strict else ""),
                f"{len(report.compiled)} compiled module(s)"]
    if report.not_installed:
        left_out.append(f"{len(report.not_installed)} file(s) of the tree the package build does not install (READMEs, sources, data; --json lists them)")
    out.print(f"{NOT_COMPARED}: {', '.join(left_out)}", markup=False)
    if report.pycache and not report.strict:
        out.print(BYTECODE_HINT, markup=False)
    stack = f"release {report.release}" + (f" plus the overlay {report.overlay}" if report.overlay else "")
    parts = " and ".join(part.prefix for part in report.parts) + (" are" if len(report.parts) > 1 else " is")
    if report.ok:
        out.print(f"verified: {parts} exactly the patched tree of {stack} (tree {report.expected_tree}; "
                  f"each of its {report.modules} modules imports from the tree's file)", markup=False)
        return ExitCode.OK
    closest = f" (the closest of {', '.join(report.candidates)})" if len(report.candidates) > 1 else ""
    for release in report.not_cached:
        out.print(f"not compared with release {release}: never applied with this cache ('--release {release}' fetches its pin and compares)", markup=False)
    out.print(f"{parts} not the patched tree of {stack}{closest} ({len(report.differences)} path(s))", markup=False)
    return ExitCode.CHECK_FAILED
