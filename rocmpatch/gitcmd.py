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
    BadObject,
    GitCommandError,
    GitCommandNotFound,
    InvalidGitRepositoryError,
    NoSuchPathError,
)
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
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise TargetRefused(f"{path}: not a git repository", hint="give a checkout made by 'rocmpatch apply', or a directory that does not exist yet") from None
    if not repo.bare and Path(repo.git_dir).resolve() == Path(path).resolve():
        # A bare mirror without a config file (core.bare unset): GitPython takes its parent for a
        # working tree and would run git there. Run git inside the repository itself instead.
        repo._working_tree_dir = None
        repo.git = git.Git(repo.git_dir)
        repo.odb = git.GitCmdObjectDB(os.path.join(repo.git_dir, "objects"), repo.git)
    return repo


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
    A changed file keeps its mode in base_tree; a new one gets modes[path] or 100644.
    """
    modes = modes or {}
    existing = list_tree(repo, base_tree) if changes else {}
    records = []
    for path, data in changes.items():
        if data is None:
            records.append(f"0 {'0' * 40}\t{path}")  # mode 0 removes the entry
        else:
            mode = existing[path].mode if path in existing else modes.get(path, REGULAR_MODE)
            records.append(f"{mode:o} {write_blob(repo, data)}\t{path}")
    with tempfile.TemporaryDirectory(prefix="rocmpatch-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        run_bytes(repo, "read-tree", base_tree, env=env)
        if records:
            stdin = "".join(r + "\0" for r in records).encode("utf-8", "surrogateescape")
            run_bytes(repo, "update-index", "-z", "--index-info", stdin=stdin, env=env)
        return run_bytes(repo, "write-tree", env=env).decode().strip()


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
    # odb.has_object only looks at loose objects; info() asks git (packs included).
    try:
        repo.odb.info(bytes.fromhex(sha))
        return True
    except (ValueError, GitCommandError, BadName, BadObject):
        return False


# --- history walking (drift) --------------------------------------------------------------


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parent: str | None  # the first parent; None for a root commit
    date: str  # committer date, ISO 8601
    subject: str


@dataclass(frozen=True)
class PathChange:
    path: str
    mode: int  # 0 when the commit deletes the path
    sha: str | None  # None when the commit deletes the path


def merge_base(repo: git.Repo, a: str, b: str) -> str | None:
    try:
        return run(repo, "merge-base", a, b) or None
    except UpstreamError:
        return None  # unrelated histories


def first_parent_line(repo: git.Repo, start: str, end: str) -> list[str]:
    """Commits on `end`'s first-parent line after `start`, oldest first."""
    return run(repo, "rev-list", "--first-parent", "--reverse", f"{start}..{end}").split()


def commit_info(repo: git.Repo, rev: str) -> CommitInfo:
    out = run(repo, "log", "-1", "--no-walk", "--format=%H%x00%P%x00%cI%x00%s", rev, "--")
    return _parse_commit_line(out)


def _parse_commit_line(line: str) -> CommitInfo:
    sha, parents, date, subject = line.split("\0", 3)
    return CommitInfo(sha, parents.split()[0] if parents else None, date, subject)


def paths_at(repo: git.Repo, commit: str, paths: Iterable[str]) -> dict[str, Entry]:
    """The entries of `paths` (files only, missing ones left out) in commit's tree."""
    out = run_bytes(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths)
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        if record:
            meta, path = record.split(b"\t", 1)
            mode, _kind, sha = meta.split(b" ")
            entries[path.decode("utf-8", "surrogateescape")] = Entry(int(mode, 8), sha.decode())
    return entries


def path_history(repo: git.Repo, start: str, end: str, paths: Iterable[str]) -> list[tuple[CommitInfo, list[PathChange]]]:
    """The commits on `end`'s first-parent line after `start` that change any of `paths`, oldest
    first, each with what it changed there relative to its first parent (merges included)."""
    out = run_bytes(
        repo, "log", "--first-parent", "--diff-merges=first-parent", "--reverse", "--raw", "-z",
        "--no-abbrev", "--no-renames", "--format=%x01%H%x00%P%x00%cI%x00%s", f"{start}..{end}", "--", *paths,
    )
    history: list[tuple[CommitInfo, list[PathChange]]] = []
    for block in out.split(b"\x01")[1:]:
        # A block: header fields NUL-separated, a newline, then ":mode mode sha sha S\0path\0" records.
        header, _, raw = block.partition(b"\n")
        info = _parse_commit_line(header.decode("utf-8", "surrogateescape").strip("\0"))
        fields = raw.lstrip(b"\n\0").split(b"\0")
        changes = []
        for meta, path in zip(fields[0::2], fields[1::2]):
            if not meta.startswith(b":"):
                continue
            _old_mode, new_mode, _old_sha, new_sha, _status = meta[1:].decode().split(" ")
            deleted = int(new_mode, 8) == 0
            changes.append(PathChange(path.decode("utf-8", "surrogateescape"), int(new_mode, 8), None if deleted else new_sha))
        history.append((info, changes))
    return history


@dataclass(frozen=True)
class Rename:
    status: str  # "R" renamed, "D" deleted
    old_path: str
    new_path: str | None
    similarity: int | None


def renames_between(repo: git.Repo, old: str, new: str, paths: Iterable[str]) -> dict[str, Rename]:
    """What became of `paths` between two commits, by git's rename detection (-M)."""
    wanted = set(paths)
    out = run_bytes(repo, "diff-tree", "-r", "-z", "-M", "-l0", "--no-commit-id", "--name-status", old, new)
    fields = out.split(b"\0")
    found: dict[str, Rename] = {}
    index = 0
    while index < len(fields) and fields[index]:
        status = fields[index].decode()
        if status.startswith(("R", "C")):
            source, target = (f.decode("utf-8", "surrogateescape") for f in fields[index + 1 : index + 3])
            if status[0] == "R" and source in wanted:
                found[source] = Rename("R", source, target, int(status[1:] or 0))
            index += 3
            continue
        path = fields[index + 1].decode("utf-8", "surrogateescape")
        if status == "D" and path in wanted:
            found.setdefault(path, Rename("D", path, None, None))
        index += 2
    return found


# --- 3-way merges and scratch repositories (rebase) ------------------------------------------


def objects_dir(repo: git.Repo) -> Path:
    """The object directory of repo (absolute), for another repository's alternates file."""
    return Path(run(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects"))


def init_borrowing_repo(path: Path, source: git.Repo) -> git.Repo:
    """A bare repository that reads source's objects (alternates) and writes its own: scratch
    work never adds anything to the source, and deleting `path` undoes all of it."""
    repo = init_repo(path, bare=True)
    alternates = Path(repo.git_dir) / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects_dir(source)}\n")
    return open_repo(path)


@dataclass(frozen=True)
class MergeResult:
    tree: str  # with conflict markers in the conflicted files
    conflicts: tuple[str, ...]


def merge_commits(repo: git.Repo, ours: str, theirs: str) -> MergeResult:
    """3-way merge of two commits at their merge base, as `git merge` would (renames followed),
    without touching an index or a working tree (`git merge-tree --write-tree`)."""
    args = ["git", "-c", "merge.conflictStyle=merge", "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs]
    status, out, err = _guard(lambda: repo.git.execute(args, with_extended_output=True, with_exceptions=False, stdout_as_string=False))
    if status not in (0, 1):
        raise UpstreamError(f"git merge-tree failed: {_last_line(err)}")
    lines = out.decode("utf-8", "surrogateescape").split("\n")
    conflicts = tuple(dict.fromkeys(line for line in lines[1:] if line))
    return MergeResult(lines[0].strip(), conflicts if status == 1 else ())


def add_worktree(repo: git.Repo, path: Path, commit: str, tree: str | None = None) -> None:
    """A working tree of `commit` at path; with `tree`, its files and index become that tree
    while HEAD stays at commit (so `git diff HEAD` there shows the change in progress)."""
    run(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    if tree is not None:
        run(path, "read-tree", "-m", "-u", tree_of(repo, commit), tree)


@dataclass(frozen=True)
class MailInfo:
    author: str
    email: str
    date: datetime.datetime
    subject: str
    body: str

    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".rstrip() + "\n"


def mail_info(repo: git.Repo, patch_text: str) -> MailInfo:
    """Author, date and message of a `git format-patch` file (`git mailinfo`)."""
    import email.utils

    with tempfile.TemporaryDirectory() as scratch:
        message, diff = Path(scratch, "msg"), Path(scratch, "patch")
        out = run(repo, "mailinfo", "--encoding=UTF-8", str(message), str(diff), stdin=patch_text.encode("utf-8", "surrogateescape"))
        fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        body = message.read_text(encoding="utf-8", errors="surrogateescape")
    date = email.utils.parsedate_to_datetime(fields["Date"]) if fields.get("Date") else datetime.datetime.now(datetime.timezone.utc)
    return MailInfo(fields.get("Author", "rocmpatch"), fields.get("Email", "rocmpatch@localhost"), date, fields.get("Subject", ""), body)


def format_patch(repo: git.Repo | Path, commit: str) -> str:
    """The commit as a patch file, in the series' format."""
    out = run_bytes(repo, "format-patch", "-1", "--zero-commit", "--no-signature", "--full-index", "--stdout", commit)
    return out.decode("utf-8", "surrogateescape")


def fetch_ref(repo: git.Repo, url: str, ref: str, local_ref: str) -> str:
    """Fetch `ref` (branch, tag or commit id) from url with its full history into local_ref."""
    check_url(url)
    try:
        repo.git.execute(["git", "fetch", "--no-tags", "--no-write-fetch-head", "--quiet", "--", url, f"+{ref}:{local_ref}"])
    except GitCommandNotFound:
        raise _git_missing() from None
    except GitCommandError as exc:
        raise UpstreamError(f"could not fetch {ref} from {url}: {_last_line(exc.stderr)}", hint="check --ref / --range / --onto and --upstream-url") from None
    return run(repo, "rev-parse", f"{local_ref}^{{commit}}")
