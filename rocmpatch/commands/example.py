"""`rocmpatch example [--write DIR]`: the launch script examples/pretrain_gpt_rocm.sh, from the checkout
(editable install) or from the copy bundled in the wheel: print where it is, or write it into DIR."""

from __future__ import annotations

import os
from pathlib import Path

from rocmpatch.console import out
from rocmpatch.errors import EnvironmentProblem, ExitCode, UsageError
from rocmpatch.files import create_new_file, current_umask
from rocmpatch.series import BUNDLED_DIR, PACKAGE_DIR

SCRIPT = "pretrain_gpt_rocm.sh"


def script_path() -> Path:
    for candidate in (PACKAGE_DIR.parent / "examples" / SCRIPT, BUNDLED_DIR / "examples" / SCRIPT):
        if candidate.is_file():
            return candidate
    raise EnvironmentProblem(f"{SCRIPT} is neither in this checkout's examples/ nor bundled with this install",
                             hint="reinstall rocmpatch from a wheel or a full checkout")


def run(*, write: Path | None) -> ExitCode:
    source = script_path()
    if write is None:
        out.print(str(source), markup=False)
        return ExitCode.OK
    if os.path.lexists(write) and not write.is_dir():
        raise UsageError(f"--write {write}: is a file, not a directory; nothing was written",
                         hint=f"--write takes the directory to write {SCRIPT} into")
    destination = write / SCRIPT
    exists = UsageError(f"{destination} already exists (a file or a symlink); nothing was written",
                        hint="remove it or choose another directory")
    if os.path.lexists(destination):
        raise exists
    try:
        write.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder of the path belongs
        raise UsageError(f"--write {write}: a part of this path is a file, so the directory cannot be made; nothing was written",
                         hint="give a directory path") from None
    try:
        # Never through a symlink at that name: O_EXCL | O_NOFOLLOW refuse one, even dangling.
        create_new_file(destination, source.read_bytes(), mode=0o755 & ~current_umask())
    except FileExistsError:
        raise exists from None
    out.print(f"wrote {destination}: run it from outside the patched tree, with --megatron-dir <tree> "
              f"(--help lists every option)", markup=False)
    return ExitCode.OK
