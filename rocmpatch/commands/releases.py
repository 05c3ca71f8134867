"""`rocmpatch releases`: what each release folder pins, which one is the default, and where its patched
tree was validated."""

from __future__ import annotations

from pathlib import Path

from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.releases import release_summaries
from rocmpatch.schema import PLATFORMS
from rocmpatch.series import find_patchsets
from rocmpatch.tables import Table


def run(*, series_dir: Path | None, as_json: bool) -> ExitCode:
    patchsets, _ = find_patchsets(series_dir)
    summaries = release_summaries(patchsets)
    if as_json:
        emit_json({"patchsets": str(patchsets.root), "lock": str(patchsets.lock_path), "releases": [s.to_json() for s in summaries]})
        return ExitCode.OK
    # A line per commit date and per platform: the table fits 80 columns without folding a word.
    table = Table("release", "upstream ref", "commit, date", "patches", "validated", title=f"releases in {patchsets.root}", title_justify="left",
                  whole=("release", "commit, date", "upstream ref"))
    for summary in summaries:
        latest = {v.platform: v.date for v in sorted(summary.validated, key=lambda v: v.date)}
        places = "\n".join(f"{p} {latest[p]}" for p in PLATFORMS if p in latest) or "nowhere yet"
        table.add_row(summary.name + (" (default)" if summary.default else ""), summary.ref or "-",
                      f"{(summary.commit or 'not locked')[:12]}\n{(summary.date or '-')[:10]}", str(summary.patches), places)
    out.print(table)
    return ExitCode.OK
