from __future__ import annotations

from rocmpatch import __version__
from rocmpatch.console import out
from rocmpatch.errors import ExitCode, RocmpatchError
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
    folders = patchsets.releases()
    newest = lock_file.newest(among=folders) if lock_file else None
    for name in folders:
        lock = releases.get(name)
        pin = f"{lock.upstream.url} {lock.upstream.ref} {lock.upstream.commit}" if lock else "not in upstream.lock"
        out.print(f"release {name}{' (newest)' if name == newest else ''}: {pin}", markup=False)
    return ExitCode.OK
