from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path, PurePosixPath

from rocmpatch.operations import verifying
from rocmpatch.commands import LISTED, difference_line, load_selected
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode, UsageError

UNTRACKED_HINT = ("added: not in pin + series, most often data, checkpoints or logs written inside the tree "
                  "(files upstream's own .gitignore ignores, such as built extensions and __pycache__, are not counted without --strict; "
                  ".git/info/exclude and core.excludesFile excuse nothing): keep them outside the tree")
IGNORED_HINT = ("ignored: a file git ignores that Python could import or run (a __pycache__/*.pyc runs instead of its "
                "verified source when its header matches): --strict counts them; remove them (below), or verify before running anything")


def run(*, target: Path | None, series_dir: Path | None, as_json: bool, upstream_url: str | None, release: str | None = None,
        strict: bool = False, overlay: Path | None = None, installed: bool = False, python: str | None = None) -> ExitCode:
    if installed or python is not None:
        if target is not None:
            raise UsageError("--target does not go with --installed",
                             hint="--installed checks the package an interpreter imports; --target DIR checks a checkout")
        from rocmpatch.commands import verify_installed

        return verify_installed.run(python=python, series_dir=series_dir, release=release, overlay=overlay, as_json=as_json,
                                    upstream_url=upstream_url, strict=strict)
    if target is None:
        raise UsageError("give --target DIR (a checkout) or --installed (the megatron package a Python imports)",
                         hint="'rocmpatch verify --help' lists the options")
    loaded = load_selected(series_dir, release, overlay, target=target)
    report = verifying.verify(loaded, target, url_override=upstream_url, strict=strict)
    if as_json:
        emit_json(report.to_json())
    else:
        if report.not_based_on_pin:
            out.print(f"not based on the pin: {report.not_based_on_pin}", markup=False)
        for problem in report.lock_problems:
            out.print(f"lock: {problem}", markup=False)
        if report.interrupted:
            out.print(f"an interrupted 'rocmpatch {report.interrupted}' is pending: run 'rocmpatch apply' or 'rocmpatch unapply'", markup=False)
        summarize = report.not_based_on_pin or len(report.differences) > LISTED
        for difference in report.differences[:LISTED] if summarize else report.differences:
            out.print(difference_line(difference), markup=False)
        if summarize and report.differences:
            counts = Counter(d.kind for d in report.differences)
            out.print(f"{len(report.differences)} path(s) differ ({', '.join(f'{n} {kind}' for kind, n in counts.most_common())}); "
                      f"the first {min(LISTED, len(report.differences))} are above, --json lists every one", markup=False)
        if any(d.kind == verifying.ADDED for d in report.differences):
            out.print(UNTRACKED_HINT, markup=False)
        ignored = [d.path for d in report.differences if d.kind == verifying.IGNORED]
        if ignored:
            out.print(IGNORED_HINT, markup=False)
            for line in cleanup_lines(target, ignored):
                out.print(line, markup=False)
        if report.ok:
            out.print(f"{target}: verified, tree {report.expected_tree} is exactly the pin of {loaded.location.release} plus {_stack(loaded)}", markup=False)
        else:
            out.print(f"{target}: differs from the pin of {loaded.location.release} plus {_stack(loaded)} ({len(report.differences)} path(s))", markup=False)
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED


def cleanup_lines(target: Path, ignored: list[str]) -> list[str]:
    """Shell lines that remove exactly these ignored files: every __pycache__ directory (Python
    writes them again), then the others by name. Not `git clean -X`: the tree's .gitignore also
    covers logs/, runs/, wandb/ and .venv, which may be the user's."""
    pycache = [p for p in ignored if "__pycache__" in PurePosixPath(p).parts]
    others = [p for p in ignored if p not in set(pycache)]
    lines = [f"to remove the {len(ignored)} ignored file(s):"]
    if pycache:
        lines.append(f"  find {shlex.quote(str(target))} -name __pycache__ -type d -prune -exec rm -rf {{}} +")
    if len(others) > LISTED:
        lines.append(f"  rocmpatch verify --strict --json lists the other {len(others)}, each by its path")
    elif others:
        lines.append("  rm -f -- " + " ".join(shlex.quote(str(target / p)) for p in others))
    return lines


def _stack(loaded) -> str:
    return f"its series and the overlay {loaded.overlay.directory}" if loaded.overlay else "its series"
