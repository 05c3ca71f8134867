"""Talking to other repositories: which URLs git may be given, and fetching from them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

from rocmpatch.errors import UpstreamError
from rocmpatch.files import naming
from rocmpatch.gitcmd.core import GitFailed, Repo, _environment, _execute, _last_line, _not_started, child_setup, run

# What git says when the remote does not have the commit asked for (local, ssh and smart http).
_NO_SUCH_COMMIT = ("not our ref", "couldn't find remote ref", "no such remote ref", "unadvertised object",
                   "not a valid object", "did not send all necessary objects")


class CommitNotOnRemote(UpstreamError):
    """The remote answered, but has no such commit (an old or partial mirror)."""


_TRANSPORT_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_ALLOWED_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")


def check_url(url: str, *, source: str = "--upstream-url") -> str:
    """Refuse URLs that make git run commands (ext::, remote helpers) or parse as options."""
    if not url or url.startswith("-"):
        raise UpstreamError(f"{source}: refusing URL {url!r}", hint="a URL may not start with '-'")
    if _TRANSPORT_PREFIX.match(url):
        raise UpstreamError(f"{source}: refusing URL {url!r}", hint="transport helpers such as ext:: are not allowed; use https://, ssh://, file:// or a path")
    if "://" in url and not url.startswith(_ALLOWED_SCHEMES):
        raise UpstreamError(f"{source}: unsupported URL scheme in {url!r}", hint="use https://, ssh://, git://, file:// or a path")
    return url


def local_path_of(url: str) -> Path | None:
    """The directory a file:// URL or a plain path names, else None."""
    if url.startswith("file://"):
        return Path(url[len("file://"):])
    if "://" in url or re.match(r"^[^/]+@[^/]+:", url):
        return None
    return Path(url)


def fetch_commit(repo: Repo, url: str, commit: str, *, depth: int | None = 1, progress=None) -> None:
    """Fetch exactly `commit` from url (shallow unless depth is None). Never runs a remote helper."""
    check_url(url)
    args = ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet"] if progress is None else ["fetch", "--no-tags", "--no-write-fetch-head", "--progress"]
    if depth:
        args += ["--depth", str(depth)]
    args += ["--", url, commit]
    with _fetch_errors(commit, url, hint="check --upstream-url / ROCMPATCH_UPSTREAM_URL, or your network"):
        # Not run_bytes: a fetch keeps the user's own ssh and credential settings (no overrides).
        if progress is None:
            _execute(repo.cwd, args, overrides=False)
        else:
            _stream_progress(repo, args, progress)


def copy_objects(source: Repo, destination: Repo) -> None:
    """Give `destination` every object of `source` (and its list of shallow commits), as files:
    hard links where the file system allows, else copies. What `git clone --local` does, which
    git refuses for a shallow source; a new target from the cache costs no pack negotiation.

    Safe while another process packs `source` (`repack -d` writes the new pack before it deletes
    the loose objects in it): loose objects are taken first, a vanished one is skipped, then the
    packs whose index is complete."""
    source_objects, destination_objects = Path(source.git_dir) / "objects", Path(destination.git_dir) / "objects"
    for fan_out in sorted(source_objects.glob("[0-9a-f][0-9a-f]")):
        for loose in fan_out.iterdir():
            _link_or_copy(loose, destination_objects / fan_out.name / loose.name)
    for index in sorted((source_objects / "pack").glob("pack-*.idx")):
        for part in sorted(index.parent.glob(f"{index.stem}.*")):
            if part.suffix in (".pack", ".rev"):
                _link_or_copy(part, destination_objects / "pack" / part.name)
        _link_or_copy(index, destination_objects / "pack" / index.name)  # last: git then sees a whole pack
    shallow = Path(source.git_dir) / "shallow"
    if shallow.exists():
        (Path(destination.git_dir) / "shallow").write_bytes(shallow.read_bytes())


def _link_or_copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(exist_ok=True)
    try:
        try:
            os.link(source, destination)
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError:  # another file system, or a file we may read but not link (fs.protected_hardlinks)
            with naming(destination):
                shutil.copyfile(source, destination)
    except FileExistsError:
        pass  # objects are named by their content: the same file
    except FileNotFoundError:
        if source.parent.name == "pack":
            raise
        # else a loose object just packed (see copy_objects)


def _stream_progress(repo: Repo, args: list[str], progress) -> None:
    """Run the fetch, feeding git's stderr progress lines ("Receiving objects:  45% (…)") to a callback."""
    try:
        process = subprocess.Popen(["git", *args], cwd=repo.cwd, env=_environment(repo.cwd, overrides=False),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   preexec_fn=child_setup(args))
    except OSError as exc:
        raise _not_started(exc, repo.cwd, args) from None
    stderr_lines: list[str] = []
    finished = False
    try:
        buffer = b""
        while True:
            chunk = process.stderr.read(256)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = re.split(rb"[\r\n]", buffer)
            for line in lines:
                text = line.decode("utf-8", "replace").strip()
                if text:
                    stderr_lines.append(text)
                    progress(text)
        finished = True
    finally:
        if not finished:  # the callback raised, or Ctrl-C: git does not fetch on alone
            process.kill()
        status = process.wait()
        process.stderr.close()
    if status:
        raise GitFailed(args, status, "\n".join(stderr_lines[-5:]), repo.cwd)


def fetch_ref(repo: Repo, url: str, ref: str, local_ref: str) -> str:
    """Fetch `ref` (branch, tag or commit id) from url with its full history into local_ref."""
    check_url(url)
    with _fetch_errors(ref, url, hint="check --ref / --range / --onto and --upstream-url"):
        _execute(repo.cwd, ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet", "--", url, f"+{ref}:{local_ref}"], overrides=False)
    return run(repo, "rev-parse", f"{local_ref}^{{commit}}")


@contextmanager
def _fetch_errors(what: str, url: str, *, hint: str):
    """A failed fetch as one clear line (a missing git is already one: EnvironmentProblem)."""
    try:
        yield
    except GitFailed as exc:
        if any(sign in (exc.stderr or "") for sign in _NO_SUCH_COMMIT):
            raise CommitNotOnRemote(f"{url} has no {what}", hint=hint) from None
        raise exc.disk_trouble() or UpstreamError(f"could not fetch {what} from {url}: {_last_line(exc.stderr)}", hint=hint) from None
