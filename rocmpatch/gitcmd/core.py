"""Running git: the scrubbed environment, opening and creating repositories, running a command,
looking up objects, and turning git's failures into RocmpatchError subclasses with one clear line.

git runs as a subprocess started here, and nowhere else: no git library (importing GitPython
alone cost a read-only command ~60 ms). A Repo is where a repository is, plus one long-lived
`git cat-file --batch` through which its objects are read."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from rocmpatch.errors import NO_SPACE_HINT, EnvironmentProblem, TargetRefused, UpstreamError
from rocmpatch.files import NEARLY_FULL, free_bytes
from rocmpatch.processes import dying_with_us

# Variables a parent git process (a hook, `git rebase -x`) leaves behind would point our git
# calls at the wrong repository. Credentials and transport settings are kept (and GitPython's
# own settings, which git ignores, for the user's other tools).
_KEPT_GIT_VARIABLES = {
    "GIT_ASKPASS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
    "GIT_TERMINAL_PROMPT", "GIT_PYTHON_REFRESH", "GIT_PYTHON_GIT_EXECUTABLE", "GIT_HTTP_PROXY_AUTHMETHOD",
    "GIT_CONFIG_NOSYSTEM", "GIT_TRACE", "GIT_CURL_VERBOSE",
}


def scrubbed_environment(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """A copy of `environ` without the GIT_* variables a parent git process leaves behind."""
    return {name: value for name, value in environ.items() if not name.startswith("GIT_") or name in _KEPT_GIT_VARIABLES}

# A target may be an untrusted checkout (verify is what a CI runs on one): no git call of ours
# may run a program its configuration or attributes name. These settings go to every git
# process through the environment; programs named in a repository's config
# (filter/diff/merge drivers, ssh and credential helpers, ...) are emptied per call, see
# _repo_overrides. Fetches (transport.py) keep the user's own ssh and credential settings.
# The environment is built per call (_environment): importing rocmpatch changes no one's os.environ.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.fileMode", "true"),  # compare what git compares: content, mode and type
    ("core.symlinks", "true"),
    # Files are checked out and hashed as their bytes are: no line-ending conversion, no
    # attributes file of the user's (verify hashes the bytes itself, and apply checks them).
    ("core.autocrlf", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.alternateRefsCommand", ""),
    ("core.editor", "true"),
    ("core.pager", "cat"),
    ("sequence.editor", "true"),
    ("commit.gpgSign", "false"),
    ("gc.auto", "0"),
    ("protocol.ext.allow", "never"),
)
# Keys of a repository's own config that name programs, emptied per call.
_PROGRAM_KEY = re.compile(
    r"^(filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)|merge\..+\.driver"
    r"|credential\.(.+\.)?helper|gpg\.(.+\.)?program|remote\..+\.(uploadpack|receivepack|vcs)|core\.(fsmonitor|sshcommand|gitproxy|askpass|editor|pager|hookspath|alternaterefscommand))$",
    re.IGNORECASE,
)


def _config_environment(extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    pairs = [*SAFE_CONFIG, *extra]
    # Replace refs (refs/replace/*) would make an object id name other content: never followed.
    env = {"GIT_CONFIG_COUNT": str(len(pairs)), "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_REPLACE_OBJECTS": "1"}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return env


_REPO_OVERRIDES: dict[str, list[tuple[str, str]]] = {}


# git's messages in English: the one-line errors quote them, open_repo recognises one.
_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
_OBJECT_TYPES = (b"blob", b"tree", b"commit", b"tag")
_OBJECT_ID = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")


class GitFailed(Exception):
    """A git command that exited non-zero; gitcmd's callers get it as UpstreamError (`one_line`)."""

    def __init__(self, args: Sequence[str], status: int, stderr: bytes | str, where: str | None = None) -> None:
        super().__init__(f"git {_subcommand(args)} exited with status {status}")
        self.command, self.status, self.stderr, self.where = list(args), status, stderr, where

    def one_line(self) -> UpstreamError | EnvironmentProblem:
        return self.disk_trouble() or UpstreamError(f"git {_subcommand(self.command)} failed: {_last_line(self.stderr)}")

    def disk_trouble(self) -> EnvironmentProblem | None:
        """A git that could not write for want of space (a full disk, a quota, `ulimit -f`), as
        the machine's problem (exit 8) rather than the upstream's. git runs with LC_ALL=C, so the
        system's message is in English; SIGXFSZ is how the file size limit stops a process. git does
        not always name the cause ("unable to write file X", "failed to write new configuration
        file"): a git that fails where the file system has (nearly) no room left failed for want of it."""
        text = self.stderr.decode("utf-8", "replace") if isinstance(self.stderr, bytes) else (self.stderr or "")
        if self.status == -signal.SIGXFSZ or f"died of signal {int(signal.SIGXFSZ)}" in text:  # git, or a git it ran
            reason = "stopped by the file size limit (ulimit -f)"
        else:
            found = next((line.strip() for line in text.splitlines() if any(cause in line for cause in _NO_SPACE)), None)
            free = free_bytes(self.where) if found is None and self.where else None
            if found is None and (free is None or free >= NEARLY_FULL):
                return None
            reason = found or f"{_last_line(text)} (its file system has {free // 1024} KiB free)"
        return EnvironmentProblem(f"git {_subcommand(self.command)} could not write: {reason}", hint=NO_SPACE_HINT)


# What the C library says in the C locale (git's here) when a write finds no room: ENOSPC, EDQUOT,
# EFBIG; and git's own word for a short write of a pack or index.
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "File too large", "Out of diskspace")



class Repo:
    """A repository as open_repo or init_repo found it: its git directory, object directory and
    the top of its working tree (None when it has none: bare, or opened at its git directory).
    git runs at the top of the working tree, else inside the git directory.

    Objects are read through one `git cat-file --batch` per Repo, started on first use and ended
    by close() (or when the Repo is dropped), so reading many blobs or commits starts no process each."""

    def __init__(self, git_dir: str, working_tree_dir: str | None, objects_dir: str) -> None:
        self.git_dir = git_dir
        self.working_tree_dir = working_tree_dir
        self.objects_dir = objects_dir
        self._batch: subprocess.Popen | None = None
        self._batch_errors = None  # the batch's stderr, a temporary file

    @property
    def bare(self) -> bool:
        return self.working_tree_dir is None

    @property
    def cwd(self) -> str:
        return self.working_tree_dir or self.git_dir

    def __repr__(self) -> str:
        return f"Repo({self.cwd!r})"

    def read_object(self, name: str) -> tuple[str, str, bytes] | None:
        """(id, type, content) of the object `name` names (an id, a ref, `rev^{tree}`: what git's
        revision syntax takes), or None when it names none (unknown, ambiguous or malformed)."""
        if not name or any(char in name for char in "\n\r\0"):
            return None  # one request per line
        batch = self._cat_file()
        try:
            batch.stdin.write(name.encode("utf-8", "surrogateescape") + b"\n")
            batch.stdin.flush()
            header = batch.stdout.readline()
        except OSError:
            header = b""
        if not header.endswith(b"\n"):
            raise self._batch_failed()
        fields = header[:-1].split(b" ")  # "<id> <type> <size>", else "<name> missing" / "<name> ambiguous"
        if len(fields) != 3 or not _OBJECT_ID.fullmatch(fields[0]) or fields[1] not in _OBJECT_TYPES or not fields[2].isdigit():
            return None
        size = int(fields[2])
        data = batch.stdout.read(size + 1)  # the content and a newline
        if len(data) != size + 1:
            raise self._batch_failed()
        return fields[0].decode(), fields[1].decode(), data[:size]

    def _cat_file(self) -> subprocess.Popen:
        if self._batch is None:
            self._batch_errors = tempfile.TemporaryFile()
            try:
                self._batch = subprocess.Popen(["git", "cat-file", "--batch"], cwd=self.cwd, env=_environment(self.cwd),
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._batch_errors)
            except OSError as exc:
                self.close()
                raise _not_started(exc, self.cwd, ["cat-file"]) from None
        return self._batch

    def _batch_failed(self) -> UpstreamError:
        errors = b""
        if self._batch_errors is not None:
            self._batch_errors.seek(0)
            errors = self._batch_errors.read()
        self.close()
        return UpstreamError(f"git cat-file failed: {_last_line(errors)}")

    def close(self) -> None:
        """End the batch process (a later lookup starts a new one)."""
        batch, self._batch = getattr(self, "_batch", None), None
        errors, self._batch_errors = getattr(self, "_batch_errors", None), None
        if batch is not None:
            try:
                batch.stdin.close()  # cat-file ends at the end of its input
                batch.wait(timeout=10)
            except (OSError, subprocess.SubprocessError):
                batch.kill()
                batch.wait()
            batch.stdout.close()
        if errors is not None:
            errors.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _repo_overrides(where: str) -> list[tuple[str, str]]:
    """Every program-naming key the repository's config sets (a filter's smudge, a diff driver's
    textconv, ...), paired with the empty value that disables it. Reading config runs nothing."""
    stamp = where + "".join(f":{_mtime(Path(where, name))}" for name in (".git/config", "config"))
    if stamp not in _REPO_OVERRIDES:
        try:
            listed = _execute(where, ["config", "-z", "--list"], overrides=False).stdout
        except (GitFailed, UpstreamError):
            listed = b""  # the command itself says what is wrong
        keys = []
        for record in listed.split(b"\0"):
            key = record.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
            if key and _PROGRAM_KEY.match(key) and not any(key.lower() == k.lower() for k, _ in SAFE_CONFIG):
                keys.append(key)
        _REPO_OVERRIDES[stamp] = [(key, "") for key in dict.fromkeys(keys)]
    return _REPO_OVERRIDES[stamp]


def _environment(where: str, env: dict[str, str] | None = None, *, overrides: bool = True) -> dict[str, str]:
    """The environment of a git process running in `where`, built from os.environ for this call:
    GIT_* variables of a parent git dropped, SAFE_CONFIG, English messages, the repository's
    program-naming keys emptied (unless overrides=False), `where` trusted when it is one of
    rocmpatch's own cache repositories (see trust), then `env`."""
    extra = list(_repo_overrides(where)) if overrides else []
    trusted = _TRUSTED.get(where)
    if trusted:
        extra.append(("safe.directory", trusted))
    return {**scrubbed_environment(), **_LOCALE, **_config_environment(extra), **(env or {})}


_TRUSTED: dict[str, str] = {}  # where git runs -> the safe.directory value for it


def trust(path: Path | str) -> None:
    """Let git work in the repository at `path` though another user owns it: rocmpatch's own cache,
    copied or shared read-only between users (git otherwise stops with "detected dubious
    ownership"). safe.directory protects a user from running the programs a stranger's
    repository configures; no git call of rocmpatch runs any (SAFE_CONFIG, _repo_overrides), and
    this is given (in the environment, where git honours it) only for the cache's own paths."""
    where = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    _TRUSTED[where] = os.path.realpath(where)


def child_setup(args: Sequence[str]):
    """The preexec_fn for a git child running `args`: dying with us (SIGTERM) for those that write
    a working tree (`read-tree -u`), fetch, or move a ref: they must not run on alone when rocmpatch
    is killed (see rocmpatch.processes). None for the rest, which end in milliseconds and would
    only pay for it (a preexec_fn costs a fork per child)."""
    command = _subcommand(args)
    if command in ("fetch", "update-ref") or (command == "read-tree" and "-u" in args):
        return dying_with_us()
    return None


def _execute(where: str, args: Sequence[str], *, stdin: bytes | None = None, env: dict[str, str] | None = None,
             overrides: bool = True, check: bool = True) -> subprocess.CompletedProcess:
    """Run `git args...` in the directory `where`; GitFailed when it fails (with check)."""
    try:
        done = subprocess.run(["git", *args], cwd=where, env=_environment(where, env, overrides=overrides), input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None, capture_output=True,
                              preexec_fn=child_setup(args))
    except OSError as exc:
        raise _not_started(exc, where, args) from None
    if check and done.returncode:
        raise GitFailed(args, done.returncode, done.stderr, where)
    return done


def _not_started(exc: OSError, where: str, args: Sequence[str]) -> EnvironmentProblem | UpstreamError:
    if exc.filename is not None and os.fspath(exc.filename) == os.fspath(where):  # chdir failed, not exec
        return UpstreamError(f"git {_subcommand(args)} failed: {where}: {exc.strerror}")
    return _git_missing()


def _where(repo: Repo | Path) -> str:
    return repo.cwd if isinstance(repo, Repo) else str(repo)


class NotARepository(TargetRefused):
    """`path` is no repository: missing, a file, a directory below a checkout's top, or one git
    knows nothing of (rocmpatch.target says which, for the command at hand)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: not a git repository", hint="give a checkout made by 'rocmpatch apply'")
        self.path = path


def _not_a_repository(path: Path) -> NotARepository:
    return NotARepository(path)


def open_repo(path: Path) -> Repo:
    """The repository at `path`: the top of its working tree, or its git directory (a bare
    repository, with or without a config file; git then runs inside it). A directory below the
    top, or inside a git directory, is not one (no search upwards), as with GitPython before."""
    where = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    if not os.path.isdir(where):
        raise _not_a_repository(path)
    try:
        out = _execute(where, ["rev-parse", "--absolute-git-dir", "--git-path", "objects", "--is-inside-work-tree", "--show-cdup"],
                       overrides=False).stdout
    except GitFailed as exc:
        if "not a git repository" in _last_line(exc.stderr):
            raise _not_a_repository(path) from None
        if "dubious ownership" in _last_line(exc.stderr):  # git's own check, for a checkout not in the cache
            raise TargetRefused(f"{path}: belongs to another user, and git refuses to work in it (safe.directory)",
                                hint=f"run as its owner, or if you trust it: git config --global --add safe.directory {where}") from None
        raise exc.one_line() from None
    # --show-cdup prints a line (empty at the top) only inside a working tree.
    lines = out.decode("utf-8", "surrogateescape").split("\n")
    git_dir, objects, inside = lines[0], lines[1], lines[2] == "true"
    if inside:
        if lines[3]:
            raise _not_a_repository(path)  # below the top
        dot_git = os.path.join(where, ".git")
        if os.path.isdir(dot_git) and os.path.realpath(dot_git) == os.path.realpath(git_dir):
            git_dir = dot_git  # the path as given (through a symlink, say), as GitPython had it
        return Repo(git_dir, where, os.path.normpath(os.path.join(where, objects)))
    if os.path.realpath(git_dir) != os.path.realpath(where):
        raise _not_a_repository(path)  # inside a git directory, or a checkout whose core.worktree is elsewhere
    return Repo(where, None, os.path.normpath(os.path.join(where, objects)))


def init_repo(path: Path, *, bare: bool = False) -> Repo:
    where = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
    os.makedirs(where, 0o755, exist_ok=True)
    try:
        _execute(where, ["init", *(["--bare"] if bare else []), "--initial-branch=main"], overrides=False)
    except GitFailed as exc:
        raise exc.one_line() from None
    git_dir = where if bare else os.path.join(where, ".git")
    return Repo(git_dir, None if bare else where, os.path.join(git_dir, "objects"))


def run(repo: Repo | Path, *args: str, stdin: bytes | None = None) -> str:
    """Run `git args...` in repo; return stdout as text without the trailing newline."""
    return run_bytes(repo, *args, stdin=stdin).decode("utf-8", "surrogateescape").rstrip("\n")


def run_bytes(repo: Repo | Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run `git args...` in repo (a Repo, or a directory); return stdout. UpstreamError, in one
    line, when git fails; EnvironmentProblem when there is no git."""
    try:
        return _execute(_where(repo), args, stdin=stdin, env=env).stdout
    except GitFailed as exc:
        raise exc.one_line() from None


def run_status(repo: Repo | Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """Run `git args...` in repo; (exit status, stdout, stderr), whatever the status."""
    done = _execute(_where(repo), args, stdin=stdin, env=env, check=False)
    return done.returncode, done.stdout, done.stderr


def require_git() -> None:
    """Fail early, before anything is created, when git is not installed."""
    try:
        subprocess.run(["git", "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        raise _git_missing() from None


def read_object(repo: Repo, name: str) -> tuple[str, str, bytes]:
    """(id, type, content) of the object `name` names; UpstreamError when there is none."""
    found = repo.read_object(name)
    if found is None:
        raise UpstreamError(f"git cat-file failed: fatal: Not a valid object name {name}")
    return found


def resolve_commit(repo: Repo, rev: str) -> str | None:
    """The full commit id `rev` names in repo, or None when it is not there (or is no commit)."""
    found = repo.read_object(f"{rev}^{{commit}}")
    return found[0] if found else None


def require_commit(repo: Repo, rev: str, *, where: str, hint: str) -> str:
    """The full commit id `rev` names, or UpstreamError saying `where` lacks it."""
    commit = resolve_commit(repo, rev)
    if commit is None:
        raise UpstreamError(f"{where} has no commit {rev!r}", hint=hint)
    return commit


def tree_of(repo: Repo, commit: str) -> str:
    return read_object(repo, f"{commit}^{{tree}}")[0]


def _subcommand(args: Sequence[str]) -> str:
    """The git subcommand among args, past `-c key=value` options."""
    index = 0
    while index < len(args) and args[index] == "-c":
        index += 2
    return args[index] if index < len(args) else ""


def _git_missing() -> EnvironmentProblem:
    return EnvironmentProblem("git was not found on PATH", hint="install git (apt install git / dnf install git) and retry")


def _last_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [line.strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    # git's own diagnosis is on its "fatal:" / "error:" line; the lines after it are often hints.
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "no message"
