"""The cache of pinned upstream commits.

One bare repository per commit id, filled by a shallow fetch of exactly that commit, so a
machine downloads the pin once (a few MB, not Megatron's whole history) and every later
apply, check or lock reads it locally. A file lock keeps two processes from filling the same
entry; a half-built entry is deleted, so the cache only ever holds complete, verified commits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from rocmpatch import gitcmd
from rocmpatch.errors import EnvironmentProblem, RocmpatchError, UpstreamError
from rocmpatch.files import file_lock
from rocmpatch.schema import Upstream

UPSTREAM_URL_VARIABLE = "ROCMPATCH_UPSTREAM_URL"
CACHE_DIR_VARIABLE = "ROCMPATCH_CACHE_DIR"
LOCK_WAIT_SECONDS = 600.0  # another process may be downloading the same commit


def cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_VARIABLE):
        return Path(os.environ[CACHE_DIR_VARIABLE]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rocmpatch"


def log_dir() -> Path:
    """Where crash logs and data-prepare logs go (`rocmpatch cache` lists them)."""
    return cache_dir() / "logs"


def _make_directory(path: Path) -> None:
    """mkdir -p inside the cache; EnvironmentProblem (exit 8) when the cache, or a folder of it,
    is a file."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise EnvironmentProblem(f"{path}: cannot be created, the rocmpatch cache {cache_dir()} (or a folder in it) is not a directory",
                                 hint=f"point {CACHE_DIR_VARIABLE} at a directory, or move that file away") from None


def upstream_url(upstream: Upstream, override: str | None = None) -> str:
    """Where to fetch from: --upstream-url, else ROCMPATCH_UPSTREAM_URL, else the lock's url.

    The commit must match whatever the source; a local path is made absolute because git runs
    in another directory.
    """
    url, source = upstream.url, "upstream.lock url"
    if override:
        url, source = override, "--upstream-url"
    elif os.environ.get(UPSTREAM_URL_VARIABLE):
        url, source = os.environ[UPSTREAM_URL_VARIABLE], UPSTREAM_URL_VARIABLE
    gitcmd.check_url(url, source=source)
    local = gitcmd.local_path_of(url)
    if local is not None:
        if not local.exists():
            raise UpstreamError(f"{source}: {local} does not exist", hint="give a git repository path, a file:// URL or https:// URL")
        url = str(local.resolve())
    return url


def _missing_commit(upstream: Upstream, url: str) -> UpstreamError:
    """An old or partial mirror, in words (git says only `upload-pack: not our ref <sha>`)."""
    when = f" updated after {upstream.date[:10]}" if upstream.date else ""
    if url == upstream.url:
        return UpstreamError(f"{url} has no commit {upstream.commit[:8]} ({upstream.ref})",
                             hint="the upstream lost the pinned commit? fetch it from a mirror with --upstream-url")
    return UpstreamError(f"the mirror {url} has no commit {upstream.commit[:8]} ({upstream.ref}): is it a full mirror{when}?",
                         hint=f"update it (git -C <mirror> fetch --tags), or fetch from {upstream.url} (unset ROCMPATCH_UPSTREAM_URL, drop --upstream-url)")


def _warn_unused_url(upstream: Upstream, url_override: str | None) -> None:
    """A warm cache fetches nothing, so --upstream-url (or the variable) is not used; say so when it
    could not have served the pin either (a missing path, a repository without the commit)."""
    if not (url_override or os.environ.get(UPSTREAM_URL_VARIABLE)):
        return
    from rocmpatch.console import note

    try:
        url = upstream_url(upstream, url_override)
        local = gitcmd.local_path_of(url)
        if local is None:
            return  # a remote URL: checking it would be the network call a warm cache never makes
        try:
            lacks = not gitcmd.has_object(gitcmd.open_repo(Path(url)), upstream.commit)
        except RocmpatchError:
            raise UpstreamError(f"{url} is not a git repository") from None
        if lacks:
            raise _missing_commit(upstream, url)
    except UpstreamError as problem:
        note(f"rocmpatch: warning: {problem.message}; not used: the cache already holds {upstream.commit[:12]} ({upstream.ref})")


def commit_path(commit: str) -> Path:
    return cache_dir() / "commits" / f"{commit}.git"


def cached_repo(upstream: Upstream, url_override: str | None = None, *, progress: bool = True) -> gitcmd.Repo:
    """The bare cache repository holding upstream.commit, fetching it on first use.

    A warm cache answers without any network call (the URL is not even checked for reachability).
    The commit id and its tree id are checked against the lock either way.
    """
    path = commit_path(upstream.commit)
    gitcmd.trust(path)  # ours, even when another user made it (a shared or copied cache)
    if path.is_dir():
        _warn_unused_url(upstream, url_override)
        return _verified(gitcmd.open_repo(path), upstream, path)
    url = upstream_url(upstream, url_override)
    _make_directory(path.parent)
    with file_lock(path.with_suffix(".lock"), wait=LOCK_WAIT_SECONDS, what=f"the cache entry {path}"):
        if path.is_dir():  # another process filled it while we waited
            return _verified(gitcmd.open_repo(path), upstream, path)
        # Holding this entry's lock, no one else is building it: any partial copy is a leftover.
        for stale in path.parent.glob(f".{upstream.commit}.*.partial"):
            shutil.rmtree(stale, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=f".{upstream.commit}.", suffix=".partial", dir=path.parent))
        try:
            repo = gitcmd.init_repo(building, bare=True)
            with _progress(f"fetching {upstream.commit[:12]} ({upstream.ref}) from {url}") as report:
                try:
                    gitcmd.fetch_commit(repo, url, upstream.commit, depth=1, progress=report)
                except gitcmd.CommitNotOnRemote:
                    raise _missing_commit(upstream, url) from None
            _verified(repo, upstream, url)
            # A ref keeps the commit reachable: safe from gc, and fetchable by id from this cache.
            gitcmd.update_ref(repo, "refs/rocmpatch/pin", upstream.commit)
            os.rename(building, path)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return gitcmd.open_repo(path)


def series_head(cache: gitcmd.Repo, key: str, patched_tree: str, compute: Callable[[gitcmd.Repo], str]) -> str | None:
    """The commit of the pin plus a series, kept in the pin's cache entry under
    refs/rocmpatch/series/<key>: `compute(cache)` makes it (writing into the cache) only the first
    time, under the entry's lock, and later new targets copy it with the pin (see
    gitcmd.copy_objects). `key` names everything the commits depend on (history.series_key); a kept
    head whose tree is not `patched_tree` is made again. None when the entry is not writable."""
    path = gitcmd.git_dir(cache)
    ref = f"refs/rocmpatch/series/{key}"
    head = gitcmd.resolve_commit(cache, ref)
    if head is not None and gitcmd.tree_of(cache, head) == patched_tree:
        return head
    if not os.access(path / "objects", os.W_OK | os.X_OK) or not os.access(path / "refs", os.W_OK | os.X_OK):
        return None
    with file_lock(path.with_suffix(".lock"), wait=LOCK_WAIT_SECONDS, what=f"the cache entry {path}"):
        head = gitcmd.resolve_commit(cache, ref)  # another process may have made it while we waited
        if head is None or gitcmd.tree_of(cache, head) != patched_tree:
            head = compute(cache)
            # Packed, so a target copies a few files rather than every new blob and tree.
            gitcmd.run(cache, "repack", "-q", "-d")
            gitcmd.update_ref(cache, ref, head, message="rocmpatch: the pin plus a series")
    return head


@contextlib.contextmanager
def scratch_over(source: gitcmd.Repo) -> Iterator[gitcmd.Repo]:
    """A throwaway repository that reads `source`'s objects and writes its own (trees computed
    while checking or verifying): the cache or a target is only ever read, so a read-only cache
    works, and nothing is left behind."""
    with tempfile.TemporaryDirectory(prefix="rocmpatch-scratch-") as directory:
        repo = gitcmd.init_borrowing_repo(Path(directory) / "scratch.git", source)
        try:
            yield repo
        finally:
            repo.close()


def _verified(repo: gitcmd.Repo, upstream: Upstream, source: Path | str) -> gitcmd.Repo:
    if gitcmd.resolve_commit(repo, upstream.commit) != upstream.commit:
        raise UpstreamError(f"{source}: does not contain commit {upstream.commit}", hint=f"delete {commit_path(upstream.commit)} and run 'rocmpatch fetch'")
    tree = gitcmd.tree_of(repo, upstream.commit)
    if upstream.tree and tree != upstream.tree:
        raise UpstreamError(f"{source}: commit {upstream.commit} has tree {tree}, but upstream.lock says {upstream.tree}", hint="the lock is wrong or the upstream was rewritten; run 'rocmpatch lock' only if you trust this upstream")
    return repo


_PERCENT = re.compile(r"^(?P<stage>[A-Za-z ]+):\s+(?P<percent>\d+)%")


@contextlib.contextmanager
def _progress(title: str):
    """A Rich progress bar fed by git's own progress lines (on stderr, gone when done)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rocmpatch.console import err

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err.rich, transient=True) as progress:
        err.print(title, markup=False)
        task = progress.add_task("connecting", total=100)

        def report(line: str) -> None:
            match = _PERCENT.match(line)
            if match:
                progress.update(task, description=match["stage"].strip(), completed=int(match["percent"]))

        yield report


# --- full history, for drift and rebase ------------------------------------------------------


def history_path(url: str) -> Path:
    return cache_dir() / "history" / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}.git"


def history_repo(url: str, revs: list[str]) -> tuple[gitcmd.Repo, dict[str, str]]:
    """A repository holding the full history of `revs` (tags, branches or commit ids), and the
    commit each names. A local mirror (path or file://) is read in place and never written; a
    remote one is fetched (full depth, unlike the pin cache) into a cache entry of its own."""
    local = gitcmd.local_path_of(url)
    if local is not None:
        repo = gitcmd.open_repo(local)
        return repo, {rev: _resolved(repo, rev, url) for rev in revs}
    path = history_path(url)
    gitcmd.trust(path)
    _make_directory(path.parent)
    with file_lock(path.with_suffix(".lock"), wait=LOCK_WAIT_SECONDS, what=f"the history cache {path}"):
        repo = gitcmd.open_repo(path) if path.is_dir() else gitcmd.init_repo(path, bare=True)
        commits = {}
        for rev in revs:
            local_ref = f"refs/rocmpatch/history/{hashlib.sha256(rev.encode()).hexdigest()[:16]}"
            with _progress(f"fetching the history of {rev} from {url}"):
                commits[rev] = gitcmd.fetch_ref(repo, url, rev, local_ref)
        return repo, commits


def _resolved(repo: gitcmd.Repo, rev: str, url: str) -> str:
    return gitcmd.require_commit(repo, rev, where=url, hint="update the mirror, or check --ref / --range / --onto")
