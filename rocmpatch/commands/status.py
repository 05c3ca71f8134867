from __future__ import annotations

from pathlib import Path

from rocmpatch.operations import series_status
from rocmpatch.commands import load_selected, patch_label
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode, TargetRefused
from rocmpatch.tables import Table


def run(*, target: Path, series_dir: Path | None, as_json: bool, release: str | None = None, overlay: Path | None = None) -> ExitCode:
    loaded = load_selected(series_dir, release, overlay, target=target)
    report = series_status.status(loaded, target)
    foreign = not report.at_pin and not series_status.descends_from(target, report.pin, report.head)
    if as_json:
        emit_json(report.to_json())
        return ExitCode.TARGET_REFUSED if foreign else ExitCode.OK
    if foreign:
        # Every patch would show as "conflicting": say the one thing that matters instead.
        raise TargetRefused(f"{target} is no checkout of release {loaded.location.release}: it is based on {report.base[:12] if report.base else 'no commit'}, not its pin {report.pin[:12]}",
                            hint="give --target a tree made by `rocmpatch apply` (`rocmpatch releases` lists each release's pin)")
    if not report.at_pin:  # the user's own commits straight on the pin
        out.print(f"warning: {target} is based on {report.base}, not the pin {report.pin}", markup=False)
    if report.user_commits:
        out.print(f"{len(report.user_commits)} commit(s) of your own on top of the series (HEAD {report.head}); "
                  "apply and unapply refuse until you save them ('unapply --force' or git format-patch) and reset to the series", markup=False)
    if report.interrupted:
        out.print(f"an interrupted 'rocmpatch {report.interrupted}' is pending: run 'rocmpatch apply' or 'rocmpatch unapply'", markup=False)
    if report.foreign_overlay:
        out.print(f"{len(report.foreign_overlay)} patch(es) of an overlay on top ({', '.join(report.foreign_overlay)}): "
                  "give that overlay with --overlay DIR to see them", markup=False)
    if report.uncommitted:
        out.print(f"uncommitted changes: {', '.join(report.uncommitted)}", markup=False)
    table = Table("#", "patch", "state", "files", title=f"{target}: release {loaded.describe()} (HEAD {report.head})", title_justify="left",
                  whole=("patch", "files"))
    for number, patch in enumerate(report.patches, start=1):
        detail = "\n".join(patch.files) + (f"\n{patch.reason}" if patch.reason else "")
        table.add_row(str(number), patch_label(patch.name, patch.layer), patch.state, detail)
    out.print(table)
    return ExitCode.OK
