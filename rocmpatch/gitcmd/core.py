"""Running git: the scrubbed environment, opening and creating repositories, running a command,
looking up commits, and turning git's failures into RocmpatchError subclasses with one clear line."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import git  # GitPython; rocmpatch/__init__.py keeps it importable when git is missing
from git.exc import (
    BadName,
    GitCommandError,
    GitCommandNotFound,
    InvalidGitRepositoryError,
    NoSuchPathError,
)

from rocmpatch.errors import EnvironmentProblem, TargetRefused, UpstreamError

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

# A target may be an untrusted checkout (verify is what a CI runs on one): no git call of ours
# may run a program its configuration or attributes name. These settings go to every git
# process (GitPython's too) through the environment; programs named in a repository's config
# (filter/diff/merge drivers, ssh and credential helpers, ...) are emptied per call, see
# _repo_overrides. Fetches (transport.py) keep the user's own ssh and credential settings.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.fileMode", "true"),  # compare what git compares: content, mode and type
    ("core.symlinks", "true"),
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


def _config_environment(extra: list[tuple[str, str]] = ()) -> dict[str, str]:
    pairs = [*SAFE_CONFIG, *extra]
    env = {"GIT_CONFIG_COUNT": str(len(pairs)), "GIT_ATTR_NOSYSTEM": "1"}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return env


os.environ.update(_config_environment())
_REPO_OVERRIDES: dict[str, list[tuple[str, str]]] = {}


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _repo_overrides(runner: git.Git) -> dict[str, str] | None:
    """Environment emptying every program-naming key the repository's config sets (a filter's
    smudge, a diff driver's textconv, ...), or None when it sets none. Reading config runs nothing."""
    where = str(runner.working_dir or "")
    stamp = where + "".join(f":{_mtime(Path(where, name))}" for name in (".git/config", "config"))
    if stamp not in _REPO_OVERRIDES:
        try:
            listed = runner.execute(["git", "config", "-z", "--list"], stdout_as_string=False, strip_newline_in_stdout=False)
        except (GitCommandError, GitCommandNotFound):
            listed = b""
        keys = []
        for record in listed.split(b"\0"):
            key = record.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
            if key and _PROGRAM_KEY.match(key) and not any(key.lower() == k.lower() for k, _ in SAFE_CONFIG):
                keys.append(key)
        _REPO_OVERRIDES[stamp] = [(key, "") for key in dict.fromkeys(keys)]
    extra = _REPO_OVERRIDES[stamp]
    return _config_environment(extra) if extra else None


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
    overrides = _repo_overrides(runner)
    if overrides:
        env = {**overrides, **(env or {})}
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


def require_commit(repo: git.Repo, rev: str, *, where: str, hint: str) -> str:
    """The full commit id `rev` names, or UpstreamError saying `where` lacks it."""
    commit = resolve_commit(repo, rev)
    if commit is None:
        raise UpstreamError(f"{where} has no commit {rev!r}", hint=hint)
    return commit


def tree_of(repo: git.Repo, commit: str) -> str:
    return repo.commit(commit).tree.hexsha


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
    lines = [line.strip().removeprefix("stderr: ").strip("'").strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    # git's own diagnosis is on its "fatal:" / "error:" line; the lines after it are often hints.
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "no message"
