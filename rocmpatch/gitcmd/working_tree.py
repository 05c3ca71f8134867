"""Working trees: status, moving between trees, snapshots."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

from rocmpatch.gitcmd.core import GitFailed, Repo, _environment, _not_started, child_setup, resolve_commit, run, run_bytes, run_status
from rocmpatch.gitcmd.objects import GITLINK_MODE, SYMLINK_MODE, Entry, blob_id


def head_commit(repo: Repo) -> str | None:
    return resolve_commit(repo, "HEAD")


def git_dir(repo: Repo) -> Path:
    return Path(repo.git_dir)


def dirty_paths(repo: Repo) -> list[tuple[str, str]]:
    """(status, path) for every path whose working tree or index differs from HEAD, untracked
    files included (ignored files are not). Without optional locks: a plain `git status` takes
    .git/index.lock to write the stat data it refreshed back into the index, so it would change
    the target of a command that promises to change nothing (verify, status, apply --dry-run), and,
    killed with rocmpatch before the move's journal exists, leave a lock no journal records (the
    next command would answer BUSY)."""
    out = run_bytes(repo, "--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=none")
    found = []
    for record in out.split(b"\0"):
        if record:
            text = record.decode("utf-8", "surrogateescape")
            found.append((text[:2], text[3:]))
    return found


def ignored_paths(repo: Repo, paths: list[str]) -> set[str]:
    """Which of these paths (files or directories, relative to the top, not tracked) the working
    tree's own .gitignore files exclude. Not .git/info/exclude nor core.excludesFile: those are the
    target's private git state, which hides a file from git but must not hide it from verify (git
    runs with a git directory of ours, empty, and core.excludesFile=/dev/null). Decided without the
    index (`--no-index`: nothing it holds or flags counts) and case-sensitively whatever
    core.ignoreCase says."""
    if not paths:
        return set()
    stdin = b"".join(os.fsencode(path) + b"\0" for path in paths)
    with tempfile.TemporaryDirectory(prefix="rocmpatch-ignore-") as empty:
        for directory in ("objects", "refs"):
            os.mkdir(os.path.join(empty, directory))
        with open(os.path.join(empty, "HEAD"), "w") as head:
            head.write("ref: refs/heads/main\n")
        env = {"GIT_DIR": empty, "GIT_WORK_TREE": repo.working_tree_dir or repo.cwd}
        status, out, err = run_status(repo, "-c", "core.ignoreCase=false", "-c", "core.excludesFile=/dev/null",
                                      "check-ignore", "--no-index", "-z", "--stdin", stdin=stdin, env=env)
    if status not in (0, 1):  # 1: none of them is ignored
        raise GitFailed(["check-ignore"], status, err).one_line()
    return {os.fsdecode(path) for path in out.split(b"\0") if path}


def hidden_edits(repo: Repo) -> list[str]:
    """Paths whose working-tree file differs from the index although `git status` cannot tell: the
    index marks them assume-unchanged (an edit, or a deletion), or skip-worktree while the file is
    there. Hashed here, as git would record them."""
    flagged: dict[str, tuple[bytes, Entry]] = {}
    for record in run_bytes(repo, "ls-files", "-s", "-v", "-z").split(b"\0"):
        if record and (record[:1].islower() or record[:1] == b"S"):  # "<tag> <mode> <id> <stage>\t<path>"
            meta, path = record.split(b"\t", 1)
            tag, mode, sha, _ = meta.split(b" ")
            flagged[path.decode("utf-8", "surrogateescape")] = (tag, Entry(int(mode, 8), sha.decode()))
    actual = worktree_entries(repo, list(flagged))
    return sorted(path for path, (tag, staged) in flagged.items()
                  if actual[path] != staged and (actual[path] is not None or tag != b"S"))


def _index_env(index: Path | None) -> dict[str, str] | None:
    return {"GIT_INDEX_FILE": str(index)} if index is not None else None


def refresh_index(repo: Repo, index: Path) -> None:
    """The stat data of `index`'s entries refreshed from the working tree (files whose stat data
    changed are hashed again; a changed file stays changed), as `git status` does for its own
    index; quietly, whatever it finds changed."""
    if index.exists():
        run_bytes(repo, "update-index", "-q", "--refresh", env=_index_env(index))


def move_tree(repo: Repo, old_tree: str, new_tree: str, *, index: Path | None = None) -> None:
    """Update index and working tree from old_tree to new_tree, touching only files that differ.
    `index`: the index file git reads and writes instead of the repository's own.

    Two-tree `read-tree -m -u` refuses (changing nothing) when a file it must change has local edits.
    """
    run_bytes(repo, "read-tree", "-m", "-u", old_tree, new_tree, env=_index_env(index))


def force_tree(repo: Repo, tree: str, *, index: Path | None = None) -> None:
    """Make index and working tree exactly `tree`, overwriting local changes (used only after
    the caller checked that nothing of the user's would be lost). Files are written by one worker
    per core (git >= 2.32; older ones ignore the setting): a whole checkout is mostly file creation.
    `index`: as for move_tree."""
    run_bytes(repo, "-c", "checkout.workers=0", "read-tree", "--reset", "-u", tree, env=_index_env(index))


def update_ref(repo: Repo, ref: str, new: str, old: str | None = None, *, message: str = "rocmpatch") -> None:
    """Point ref at new; with old, only if it still points at old (compare-and-swap)."""
    run(repo, "update-ref", "-m", message, ref, new, *([old] if old else []))


def update_ref_holding(repo: Repo, ref: str, new: str, old: str | None, *, message: str, while_locked) -> None:
    """update_ref as one `git update-ref --stdin` transaction, calling `while_locked()` once git
    holds the lock files of the refs it updates (between `prepare` and `commit`), so the caller can
    record them: a git killed in between leaves them behind. A git without transactions (< 2.27)
    gets a plain update-ref."""
    with tempfile.TemporaryFile() as errors:
        try:
            # A session of its own: a kill of rocmpatch's process group (or Ctrl-C) does not reach it;
            # when rocmpatch dies, SIGTERM or the end of its input aborts the transaction and git
            # removes the lock files itself.
            process = subprocess.Popen(["git", "update-ref", "-m", message, "--stdin"], cwd=repo.cwd, env=_environment(repo.cwd),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, start_new_session=True,
                                       preexec_fn=child_setup(["update-ref"]))
        except OSError as exc:
            raise _not_started(exc, repo.cwd, ["update-ref"]) from None
        try:
            def say(line: str) -> bytes:
                process.stdin.write(line.encode() + b"\n")
                process.stdin.flush()
                return process.stdout.readline()

            if say("start") != b"start: ok\n":
                process.stdin.close()
                process.wait()
                return update_ref(repo, ref, new, old, message=message)
            process.stdin.write(f"update {ref} {new}{' ' + old if old else ''}\n".encode())
            if say("prepare") == b"prepare: ok\n":
                try:
                    while_locked()
                except BaseException:
                    say("abort")  # git removes its lock files
                    raise
                if say("commit") == b"commit: ok\n":
                    process.stdin.close()
                    if process.wait() == 0:
                        return
        except OSError:  # git exited: its stderr says why
            pass
        finally:
            if process.poll() is None:
                process.terminate()  # not SIGKILL: git removes its lock files on SIGTERM
            process.wait()
            process.stdout.close()
            with contextlib.suppress(OSError):
                process.stdin.close()
        errors.seek(0)
        raise GitFailed(["update-ref"], process.returncode, errors.read(), repo.cwd).one_line()


def hash_files(repo: Repo, paths: list[str]) -> dict[str, str | None]:
    """Blob ids of working-tree files as git would store them; None for a missing file."""
    root = Path(repo.working_tree_dir)
    present = [p for p in paths if (root / p).is_file() or (root / p).is_symlink()]
    result: dict[str, str | None] = {p: None for p in paths}
    # --stdin-paths is newline-separated and has no -z form: a name holding a newline (any other
    # byte is fine) is hashed on its own command line.
    listed = [p for p in present if "\n" not in p]
    if listed:
        out = run(repo, "hash-object", "--stdin-paths", stdin="".join(p + "\n" for p in listed).encode("utf-8", "surrogateescape"))
        result.update(zip(listed, out.split("\n")))
    for path in present:
        if "\n" in path:
            result[path] = run(repo, "hash-object", "--", path)
    return result


def worktree_entries(repo: Repo, paths: list[str]) -> dict[str, Entry | None]:
    """What git would record for each working-tree path: mode (regular, executable, symlink;
    a directory is a gitlink with no id) and blob id of the raw bytes, read without git (no
    filter runs, no symlink is followed); None for a missing path."""
    root = Path(repo.working_tree_dir)
    found: dict[str, Entry | None] = {}
    for path in paths:
        full = root / path
        try:
            info = os.lstat(full)
        except OSError:
            found[path] = None
            continue
        if stat.S_ISLNK(info.st_mode):
            found[path] = Entry(SYMLINK_MODE, blob_id(os.fsencode(os.readlink(full))))
        elif stat.S_ISREG(info.st_mode):
            found[path] = Entry(0o100755 if info.st_mode & 0o100 else 0o100644, _file_blob_id(full, info.st_size))
        elif stat.S_ISDIR(info.st_mode):
            found[path] = Entry(GITLINK_MODE, "")
        else:
            found[path] = None
    return found


def _file_blob_id(path: Path, size: int) -> str:
    digest = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def changed_paths(repo: Repo, old_tree: str, new_tree: str) -> list[str]:
    out = run_bytes(repo, "diff-tree", "-r", "-z", "--no-renames", "--name-only", old_tree, new_tree)
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def worktree_tree(repo: Repo, *, leave_out: list[str] = ()) -> str:
    """A tree id of the working tree as it is (untracked files included, ignored ones not),
    built in a temporary index so the repository's own index is left alone (nor its flags:
    assume-unchanged, skip-worktree): every file is hashed, with its mode and type.
    `leave_out` names paths (nested repositories) not to record."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        if resolve_commit(repo, "HEAD"):
            run_bytes(repo, "read-tree", "HEAD", env=env)
        excluded = [f":(exclude,literal){path.rstrip('/')}" for path in leave_out]
        run_bytes(repo, "add", "-A", "--", ".", *excluded, env=env)
        return run_bytes(repo, "write-tree", env=env).decode().strip()


def diff_trees(repo: Repo, old_tree: str, new_tree: str) -> bytes:
    """A patch from old_tree to new_tree that `git apply` takes back (binary-safe, full ids)."""
    return run_bytes(repo, "diff", "--no-ext-diff", "--no-textconv", "--binary", "--full-index", "--no-renames", old_tree, new_tree)
