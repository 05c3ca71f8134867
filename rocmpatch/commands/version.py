from __future__ import annotations

from rocmpatch import __version__
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, RocmpatchError
from rocmpatch.schema import load_lock
from rocmpatch.series import locate


def run() -> ExitCode:
    out.print(f"rocmpatch {__version__}", markup=False)
    location = locate()
    try:
        upstream = load_lock(location.lock_path).upstream
        out.print(f"pinned upstream: {upstream.url} {upstream.ref} {upstream.commit}", markup=False)
    except RocmpatchError as exc:
        out.print(f"pinned upstream: unknown ({exc.message})", markup=False)
    out.print(f"series: {location.series_dir}", markup=False)
    return ExitCode.OK
