from __future__ import annotations

from rocmpatch import __version__
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, RocmpatchError
from rocmpatch.releases import default_location
from rocmpatch.series import find_patchsets


def run() -> ExitCode:
    out.print(f"rocmpatch {__version__}", markup=False)
    patchsets, _ = find_patchsets()
    out.print(f"patchsets: {patchsets.root}", markup=False)
    try:
        lock_file = patchsets.lock_file()
    except RocmpatchError as exc:
        out.print(f"pinned upstream: unknown ({exc.message})", markup=False)
        return ExitCode.OK
    releases = lock_file.releases if lock_file else {}
    locations = [patchsets.location(name) for name in patchsets.releases()]
    try:
        default = default_location(patchsets, locations) if len(locations) > 1 else next(iter(locations), None)
    except RocmpatchError as exc:
        default = None
        out.print(f"default release: unknown ({exc.message})", markup=False)
    for location in locations:
        lock = releases.get(location.release)
        pin = f"{lock.upstream.url} {lock.upstream.ref} {lock.upstream.commit}" if lock else "not in upstream.lock"
        out.print(f"release {location.release}{' (default)' if location == default else ''}: {pin}", markup=False)
    return ExitCode.OK
