"""Running git: the scrubbed environment, opening and creating repositories, running a command,
looking up commits, and turning git's failures into RocmpatchError subclasses with one clear line."""

from __future__ import annotations

import os
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
