"""The only module that runs git.

It works on git objects (blobs, trees, commits) through GitPython, so a patch can be applied,
checked or compared without touching a working tree. Failures become RocmpatchError subclasses
with one clear line.
"""

from __future__ import annotations

import datetime
import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# GitPython refuses to import when git is missing; we want our own clear error at first use.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git  # noqa: E402  (GitPython)
from git.exc import (  # noqa: E402
    BadName,
    GitCommandError,
    GitCommandNotFound,
    InvalidGitRepositoryError,
    NoSuchPathError,
)
from git.index.typ import BaseIndexEntry, IndexEntry  # noqa: E402
from gitdb.base import IStream  # noqa: E402

from rocmpatch.errors import EnvironmentProblem, TargetRefused, UpstreamError  # noqa: E402

SYMLINK_MODE = 0o120000
GITLINK_MODE = 0o160000
REGULAR_MODE = 0o100644

# Variables a parent git process (a hook, `git rebase -x`) leaves behind would point our git
# calls at the wrong repository. Credentials and transport settings are kept.
_KEPT_GIT_VARIABLES = {
    "GIT_ASKPASS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
    "GIT_TERMINAL_PROMPT", "GIT_PYTHON_REFRESH", "GIT_PYTHON_GIT_EXECUTABLE", "GIT_HTTP_PROXY_AUTHMETHOD",
    "GIT_CONFIG_NOSYSTEM", "GIT_TRACE", "GIT_CURL_VERBOSE",
}


def scrub_git_environment(environ: dict[str, str] | os._Environ = os.environ) -> None:
    for name in list(environ):
        if name.startswith("GIT_") and name not in _KEPT_GIT_VARIABLES:
            del environ[name]


scrub_git_environment()

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


def open_repo(path: Path) -> git.Repo:
    try:
        return git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise TargetRefused(f"{path}: not a git repository", hint="give a checkout made by 'rocmpatch apply', or a directory that does not exist yet") from None


def init_repo(path: Path, *, bare: bool = False) -> git.Repo:
    return _guard(lambda: git.Repo.init(path, bare=bare, initial_branch="main"))


def run(repo: git.Repo | Path, *args: str, stdin: bytes | None = None) -> str:
    """Run `git args...` in repo; return stdout as text without the trailing newline."""
    return run_bytes(repo, *args, stdin=stdin).decode("utf-8", "surrogateescape").rstrip("\n")


def run_bytes(repo: git.Repo | Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    runner = repo.git if isinstance(repo, git.Repo) else git.Git(str(repo))
    kwargs = {"stdout_as_string": False, "strip_newline_in_stdout": False, "env": env}
    if stdin is not None:
        return _guard(lambda: _run_with_input(runner, args, stdin, kwargs))
    return _guard(lambda: runner.execute(["git", *args], **kwargs))


def _run_with_input(runner: git.Git, args: tuple[str, ...], stdin: bytes, kwargs: dict) -> bytes:
    # GitPython wants a real file as stdin.
    with tempfile.TemporaryFile() as handle:
        handle.write(stdin)
        handle.seek(0)
        return runner.execute(["git", *args], istream=handle, **kwargs)


def require_git() -> None:
    """Fail early, before anything is created, when git is not installed."""
    try:
        git.Git().execute(["git", "--version"])
    except GitCommandNotFound:
        raise _git_missing() from None


def resolve_commit(repo: git.Repo, rev: str) -> str | None:
    """The full commit id `rev` names in repo, or None when it is not there."""
    try:
        return repo.commit(rev).hexsha
    except (BadName, ValueError, GitCommandError):
        return None


def tree_of(repo: git.Repo, commit: str) -> str:
    return repo.commit(commit).tree.hexsha


def fetch_commit(repo: git.Repo, url: str, commit: str, *, depth: int | None = 1, progress=None) -> None:
    """Fetch exactly `commit` from url (shallow unless depth is None). Never runs a remote helper."""
    check_url(url)
    args = ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet"] if progress is None else ["fetch", "--no-tags", "--no-write-fetch-head", "--progress"]
    if depth:
        args += ["--depth", str(depth)]
    args += ["--", url, commit]
    try:
        if progress is None:
            repo.git.execute(["git", *args])
        else:
            process = repo.git.execute(["git", *args], as_process=True)
            _stream_progress(process, progress)
    except GitCommandNotFound:
        raise _git_missing() from None
    except GitCommandError as exc:
        raise UpstreamError(f"could not fetch {commit} from {url}: {_last_line(exc.stderr)}", hint="check --upstream-url / ROCMPATCH_UPSTREAM_URL, or your network") from None


def _stream_progress(process, progress) -> None:
    """Feed git's stderr progress lines ("Receiving objects:  45% (…)") to a callback."""
    buffer = b""
    stderr_lines: list[str] = []
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
    process.stdout.read()
    status = process.wait(stderr=b"\n".join(s.encode() for s in stderr_lines[-5:]))
    if status:
        raise GitCommandError("fetch", status, "\n".join(stderr_lines[-3:]))


@dataclass(frozen=True)
class Entry:
    mode: int
    sha: str


class TreeReader:
    """Files of one git tree, read straight from the object database (no working tree)."""

    def __init__(self, repo: git.Repo, treeish: str) -> None:
        self.repo = repo
        self.tree = repo.commit(treeish).tree.hexsha if _is_commitish(repo, treeish) else treeish
        self._entries: dict[str, Entry] | None = None

    @property
    def entries(self) -> dict[str, Entry]:
        if self._entries is None:
            self._entries = list_tree(self.repo, self.tree)
        return self._entries

    def read(self, path: str) -> bytes | None:
        entry = self.entries.get(path)
        if entry is None or entry.mode in (SYMLINK_MODE, GITLINK_MODE):
            return None
        return read_blob(self.repo, entry.sha)

    def symlink_on_path(self, path: str) -> str | None:
        """The first symlink among `path` and its parent directories, if any."""
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            prefix = "/".join(parts[:end])
            entry = self.entries.get(prefix)
            if entry is not None and entry.mode == SYMLINK_MODE:
                return prefix
        return None


def list_tree(repo: git.Repo, tree: str) -> dict[str, Entry]:
    out = run_bytes(repo, "ls-tree", "-r", "-z", "--full-tree", tree)
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, _kind, sha = meta.split(b" ")
        entries[path.decode("utf-8", "surrogateescape")] = Entry(int(mode, 8), sha.decode())
    return entries


def read_blob(repo: git.Repo, sha: str) -> bytes:
    return _guard(lambda: repo.odb.stream(bytes.fromhex(sha)).read())


def write_blob(repo: git.Repo, data: bytes) -> str:
    return _guard(lambda: repo.odb.store(IStream("blob", len(data), io.BytesIO(data))).binsha.hex())


def write_tree(repo: git.Repo, base_tree: str, changes: dict[str, bytes | None], modes: dict[str, int] | None = None) -> str:
    """A new tree: base_tree with `changes` ({path: bytes, or None to delete}) written over it.

    Uses a temporary index file, so neither the repository's index nor any working tree changes.
    """
    modes = modes or {}
    existing = list_tree(repo, base_tree)

    def build():
        # An in-memory index built from the tree: IndexFile.from_tree would swap the user's
        # .git/index aside while it works, and add/remove insist on that default index.
        # We never call index.write(), so the repository's index is never touched.
        index = git.IndexFile.new(repo, base_tree)
        for path, data in changes.items():
            index.entries.pop((path, 0), None)
            if data is not None:
                mode = modes.get(path, existing[path].mode if path in existing else REGULAR_MODE)
                base = BaseIndexEntry((mode, bytes.fromhex(write_blob(repo, data)), 0, path))
                index.entries[(path, 0)] = IndexEntry.from_base(base)
        return index.write_tree().hexsha

    return _guard(build)


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    date: datetime.datetime  # timezone-aware; a fixed date keeps commit ids reproducible


def commit_tree(repo: git.Repo, tree: str, parent: str, message: str, identity: Identity, trailers: Iterable[tuple[str, str]] = ()) -> str:
    actor = git.Actor(identity.name, identity.email)
    return _guard(
        lambda: git.Commit.create_from_tree(
            repo, repo.tree(tree), message, parent_commits=[repo.commit(parent)], head=False,
            author=actor, committer=actor, author_date=identity.date, commit_date=identity.date,
            trailers=list(trailers) or None,
        ).hexsha
    )


def commit_trailers(repo: git.Repo, commit: str) -> dict[str, str]:
    """The commit message's trailers; the last value wins for a repeated key."""
    return {key: values[-1] for key, values in repo.commit(commit).trailers_dict.items()}


def _is_commitish(repo: git.Repo, rev: str) -> bool:
    try:
        return repo.rev_parse(rev).type in ("commit", "tag")
    except (BadName, ValueError):
        return False


def _guard(action):
    try:
        return action()
    except GitCommandNotFound:
        raise _git_missing() from None
    except GitCommandError as exc:
        raise UpstreamError(f"git {exc.command[1] if len(exc.command) > 1 else ''} failed: {_last_line(exc.stderr)}") from None


def _git_missing() -> EnvironmentProblem:
    return EnvironmentProblem("git was not found on PATH", hint="install git (apt install git / dnf install git) and retry")


def _last_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [line.strip().removeprefix("stderr: ").strip("'") for line in (text or "").splitlines() if line.strip()]
    # git's own diagnosis is on its "fatal:" / "error:" line; the lines after it are often hints.
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "no message"


def commit_date(repo: git.Repo, commit: str) -> datetime.datetime:
    return repo.commit(commit).committed_datetime


# --- working trees: status, moving between trees, snapshots -----------------------------


def head_commit(repo: git.Repo) -> str | None:
    return resolve_commit(repo, "HEAD")


def git_dir(repo: git.Repo) -> Path:
    return Path(repo.git_dir)


def dirty_paths(repo: git.Repo) -> list[tuple[str, str]]:
    """(status, path) for every path whose working tree or index differs from HEAD, untracked
    files included (ignored files are not)."""
    out = run_bytes(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=none")
    found = []
    for record in out.split(b"\0"):
        if record:
            text = record.decode("utf-8", "surrogateescape")
            found.append((text[:2], text[3:]))
    return found


def move_tree(repo: git.Repo, old_tree: str, new_tree: str) -> None:
    """Update index and working tree from old_tree to new_tree, touching only files that differ.

    Two-tree `read-tree -m -u` refuses (changing nothing) when a file it must change has local edits.
    """
    run(repo, "read-tree", "-m", "-u", old_tree, new_tree)


def force_tree(repo: git.Repo, tree: str) -> None:
    """Make index and working tree exactly `tree`, overwriting local changes (used only after
    the caller checked that nothing of the user's would be lost)."""
    run(repo, "read-tree", "--reset", "-u", tree)


def update_ref(repo: git.Repo, ref: str, new: str, old: str | None = None, *, message: str = "rocmpatch") -> None:
    """Point ref at new; with old, only if it still points at old (compare-and-swap)."""
    run(repo, "update-ref", "-m", message, ref, new, *([old] if old else []))


def hash_files(repo: git.Repo, paths: list[str]) -> dict[str, str | None]:
    """Blob ids of working-tree files as git would store them; None for a missing file."""
    root = Path(repo.working_tree_dir)
    present = [p for p in paths if (root / p).is_file() or (root / p).is_symlink()]
    result: dict[str, str | None] = {p: None for p in paths}
    if present:
        out = run(repo, "hash-object", "--stdin-paths", stdin="".join(p + "\n" for p in present).encode("utf-8", "surrogateescape"))
        result.update(zip(present, out.split("\n")))
    return result


def changed_paths(repo: git.Repo, old_tree: str, new_tree: str) -> list[str]:
    out = run_bytes(repo, "diff-tree", "-r", "-z", "--no-renames", "--name-only", old_tree, new_tree)
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def worktree_tree(repo: git.Repo) -> str:
    """A tree id of the working tree as it is (untracked files included, ignored ones not),
    built in a temporary index so the repository's own index is left alone."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_bytes(repo, "read-tree", "HEAD", env=env)
        run_bytes(repo, "add", "-A", "--", ".", env=env)
        return run_bytes(repo, "write-tree", env=env).decode().strip()


def diff_trees(repo: git.Repo, old_tree: str, new_tree: str) -> bytes:
    """A patch from old_tree to new_tree that `git apply` takes back (binary-safe, full ids)."""
    return run_bytes(repo, "diff", "--binary", "--full-index", "--no-renames", old_tree, new_tree)


def has_object(repo: git.Repo, sha: str) -> bool:
    try:
        return bool(repo.odb.has_object(bytes.fromhex(sha)))
    except (ValueError, GitCommandError):
        return False
