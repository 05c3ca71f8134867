"""Replacing a file whole: a reader (or a process killed mid-write) sees the old content or the new, never half.

Every file rocmpatch writes inside a target's .git (journal, saved edits, lock) may sit next to
something planted there: a temporary name is created exclusively and never through a symlink.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An OSError raised while writing `path` names it (a failed write() names no file), so the
    one-line error says which file could not be written (a full disk: error_handler.as_user_error)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise


def replace_file(path: Path, data: bytes, *, durable: bool = False, mode: int | None = None) -> None:
    """Write `data` beside `path`, then rename it over `path` (atomic on POSIX).

    The temporary file gets a fresh random name, created with O_EXCL (mkstemp), so a file or
    symlink planted at a predictable name is never followed or overwritten; renaming over a
    symlink at `path` replaces the link, not its target.
    `durable` also syncs the data to disk first, for records that must survive a crash (the journal).
    `mode`: the new file's permission bits (mkstemp's are 0600), e.g. those of the file it replaces."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".rocmpatch-tmp", dir=path.parent)
    try:
        with naming(temporary), os.fdopen(handle, "wb") as stream:
            if mode is not None:
                os.fchmod(stream.fileno(), mode)
            stream.write(data)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def create_new_file(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write a file that must not exist yet (O_EXCL | O_NOFOLLOW: a symlink at its name, even a
    dangling one, is refused, never written through), synced to disk. A failed write removes it."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, mode)
    try:
        with naming(path), os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), mode)  # the umask may have taken bits away at creation
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def current_umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def open_lock_file(path: Path):
    """Open (creating it if needed) a lock file without following a symlink at its name."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    return os.fdopen(handle, "a+")


MAX_TEXT_FILE = 4 * 1024 * 1024  # series.yaml, upstream.lock
MAX_PATCH_FILE = 64 * 1024 * 1024


NEARLY_FULL = 1 << 20  # bytes free under which a write that failed is taken to have run out of room


def free_bytes(path: Path | str) -> int | None:
    """Bytes an unprivileged write may still use on the file system holding `path` (or the
    nearest existing directory above it); None when that cannot be said."""
    path = os.fspath(path)
    while path and not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        info = os.statvfs(path)
    except (OSError, ValueError):
        return None
    return info.f_bavail * info.f_frsize


def read_regular_file(path: Path, *, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InvalidInput for anything else.

    A FIFO, a device (/dev/zero), a directory or a socket is refused before reading, so a bad
    path never hangs or exhausts memory."""
    from rocmpatch.errors import InvalidInput

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InvalidInput(path, f"{what} not found") from None
    except IsADirectoryError:
        raise InvalidInput(path, f"is a directory, not a {what}") from None
    except PermissionError:
        raise InvalidInput(path, f"cannot read the {what} (permission denied)") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise InvalidInput(path, f"is a directory, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(path, f"is not a regular file (a FIFO, device or socket); expected a {what}")
        if info.st_size > limit:
            raise InvalidInput(path, f"is {info.st_size} bytes, more than the {limit} a {what} may have")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(descriptor, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise InvalidInput(path, f"is more than the {limit} bytes a {what} may have")
    return data


@contextlib.contextmanager
def file_lock(path: Path, *, wait: float, what: str) -> Iterator[None]:
    """An exclusive fcntl lock on `path`; raises Busy after `wait` seconds.

    The kernel drops the lock when the process dies, so a crash never leaves a stale lock.
    """
    from rocmpatch.errors import Busy, TargetRefused

    try:
        handle = open_lock_file(path)
    except OSError as exc:  # ELOOP: a symlink planted at the lock's name
        raise TargetRefused(f"{path}: cannot open the lock file ({exc.strerror})", hint=f"remove {path} if it is a symlink") from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(f"{what} is in use by another rocmpatch process (lock {path})", hint="wait for it to finish and retry") from None
                time.sleep(0.1)
        yield
    finally:
        handle.close()


def refuse_unwritable_output(path: Path, option: str) -> None:
    """Before any work: a report file a command was asked to write (`drift --markdown FILE`,
    `preflight --json FILE`) must be a regular file or a new name in an existing, writable directory.
    A directory, a FIFO (writing would block) or a missing folder would otherwise fail only after the
    work, or hang. UsageError naming the option and the path."""
    from rocmpatch.errors import UsageError

    shown = f"{option} {path}"
    if path.is_dir():
        raise UsageError(f"{shown}: is a directory, not a file", hint=f"give a file path, such as {path / 'report'}")
    if os.path.lexists(path) and not path.is_file():
        raise UsageError(f"{shown}: exists and is not a regular file (a FIFO, device or dangling link)", hint="give the path of a regular file, or a new one")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"{shown}: the directory {parent} does not exist", hint="create it first, or give a path in an existing directory")
    if not os.access(path if path.exists() else parent, os.W_OK) or not os.access(parent, os.X_OK):
        raise UsageError(f"{shown}: not writable", hint="give a path you may write")

