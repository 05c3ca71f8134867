"""Issue 23, robustness: odd paths, environments and full disks end in one line and a documented
exit code, with nothing changed on disk. Real git repositories and real processes throughout."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess

import pytest

from rocmpatch import gitcmd
from rocmpatch.errors import ExitCode
from tests.cli_process import run_rocmpatch
from tests.fixtures import commit_all, make_series, write_files


def one_error_line(stderr: str) -> str:
    """The one error line, last but for its hint (progress notes may come before); fails on a
    traceback or a bug report."""
    lines = stderr.strip().splitlines()
    errors = [number for number, line in enumerate(lines) if line.startswith("rocmpatch: error: ")]
    assert len(errors) == 1, stderr
    assert all(line.startswith("  hint: ") for line in lines[errors[0] + 1:]), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[errors[0]]


def tree_files(root) -> dict[str, bytes]:
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = b"link" if os.path.islink(path) else open(path, "rb").read()
    return found


# --- commits on top of the series are the user's, amended or not ------------------------------


def amend(target, files: dict, *args: str) -> str:
    write_files(target, files)
    subprocess.run(["git", "-C", str(target), "-c", "user.name=Me", "-c", "user.email=me@example.com",
                    "commit", "-q", "-a", "--amend", "--no-edit", *args], check=True)
    return gitcmd.head_commit(gitcmd.open_repo(target))


def test_an_edit_amended_into_the_last_patch_commit_is_the_users(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    mine = (target / "pkg/b.py").read_text() + "# mine\n"
    head = amend(target, {"pkg/b.py": mine})
    for command in ("apply", "unapply"):
        result = cli(command, "--target", str(target))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (command, result.output)
        line = one_error_line(result.stderr)
        assert f"the commit of patch second-fix ({head[:12]}) holds changes that are not the patch's (pkg/b.py)" in line
        assert "unapply --force" in result.stderr
        assert gitcmd.head_commit(gitcmd.open_repo(target)) == head and (target / "pkg/b.py").read_text() == mine
    status = cli("status", "--target", str(target), "--json")
    patches = __import__("json").loads(status.stdout)["patches"]
    assert [p["state"] for p in patches] == ["applied", "conflicting"] and "amended" in patches[1]["reason"]
    result = cli("unapply", "--force", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert f"saved your commit {head[:12]}" in result.stdout
    saved = next((target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    assert cli("apply", "--target", str(target)).exit_code == 0
    subprocess.run(["git", "-C", str(target), "apply", str(saved)], check=True)
    assert (target / "pkg/b.py").read_text() == mine


def test_an_amended_mode_or_earlier_commit_is_the_users_too(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    subprocess.run(["git", "-C", str(target), "reset", "-q", "--hard", "HEAD~1"], check=True)  # first-fix only
    os.chmod(target / "pkg/new.py", 0o755)
    head = amend(target, {})
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED, result.output
    assert f"the commit of patch first-fix ({head[:12]}) holds changes that are not the patch's (pkg/new.py)" in result.stderr
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == head


def test_a_commit_amended_without_changing_its_content_is_still_the_series(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    amend(target, {}, "--reset-author")
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert "already applied" in result.stdout
    assert cli("unapply", "--target", str(target)).exit_code == 0


# --- output that the terminal cannot encode --------------------------------------------------


def test_ascii_only_output_shows_a_non_ascii_path_escaped(cli, project, tmp_path):
    target = tmp_path / "tü"
    assert cli("apply", "--target", str(target)).exit_code == 0
    (target / "ü.txt").write_text("x\n")
    env = {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    where = ["--target", str(target), "--series-dir", str(project.series_dir)]
    status = run_rocmpatch("status", *where, env=env)
    assert status.returncode == 0, status.stderr
    assert "uncommitted changes: \\xfc.txt" in status.stdout
    verify = run_rocmpatch("verify", *where, env=env)
    assert verify.returncode == ExitCode.CHECK_FAILED, verify.stderr
    assert "\\xfc.txt" in verify.stdout and "internal error" not in verify.stderr


# --- paths rocmpatch cannot use ---------------------------------------------------------------


def test_cache_dir_that_is_a_file_is_exit_8(cli, tmp_path, monkeypatch):
    cache = tmp_path / "cache-file"
    cache.write_text("not a directory\n")
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(cache))
    for command in (["fetch"], ["check"], ["lock", "--check"], ["apply", "--target", str(tmp_path / "t")]):
        result = cli(*command)
        assert result.exit_code == ExitCode.ENVIRONMENT, (command, result.output)
        assert "is not a directory" in one_error_line(result.stderr), command
    assert cache.read_text() == "not a directory\n" and not (tmp_path / "t").exists()


def test_a_4k_target_path_is_refused_by_every_command(cli, tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 21)
    for command in ("apply", "unapply", "verify", "status"):
        result = cli(command, "--target", str(deep))
        assert result.exit_code == ExitCode.USAGE, (command, result.output)
        assert "the path is too long" in one_error_line(result.stderr), command
    assert sorted(tmp_path.iterdir()) == [tmp_path / "proj", tmp_path / "upstream"]


def test_a_target_path_with_a_line_break_is_refused_by_every_command(cli, tmp_path):
    target = tmp_path / "line\nbreak"
    for command in ("apply", "unapply", "verify", "status"):
        result = cli(command, "--target", str(target))
        assert result.exit_code == ExitCode.USAGE, (command, result.output)
        assert "the path holds a line break" in one_error_line(result.stderr), command
    assert not target.exists() and not list(tmp_path.glob(".line*"))


@pytest.mark.parametrize("name", [b"-leading-dash", b"--target", b"esc\x1bape", b" space\ttab", b"sub/../t"])
def test_odd_target_names_work_alike_in_every_command(cli, tmp_path, monkeypatch, name):
    """Names with leading dashes, bytes that are not UTF-8, control characters, `..` (with no `sub`):
    one directory for every command (git is never handed the name as an option)."""
    monkeypatch.chdir(tmp_path)
    for command in ("apply", "verify", "status", "unapply", "apply"):
        result = cli(command, "--target=" + os.fsdecode(name))
        assert result.exit_code == 0, (command, result.output)
    made = tmp_path / os.fsdecode(os.path.normpath(name))
    assert (made / ".git").is_dir() and (made / "pkg/new.py").exists()


def test_a_target_name_that_is_not_utf8_works_in_every_command(project, tmp_path):
    """Raw argv bytes, as a shell passes a Latin-1 name, in a real process (its console writes such names)."""
    import sys

    from tests.cli_process import ROOT

    for command in ("apply", "verify", "status", "unapply", "apply"):
        done = subprocess.run([sys.executable, "-m", "rocmpatch", command, b"--target=caf\xe9", "--series-dir", str(project.series_dir)],
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
        assert done.returncode == 0, (command, done.stderr)
    assert (tmp_path / os.fsdecode(b"caf\xe9") / ".git").is_dir()


@pytest.mark.parametrize("name, message", [
    ("", "an empty path"), ("loop", "a symlink that leads nowhere"), ("dangling", "a symlink that leads nowhere"),
    ("new\nline", "holds a line break"), ("cr\rname", "holds a line break")])
def test_unusable_target_names_are_refused_in_one_line(cli, tmp_path, monkeypatch, name, message):
    work = tmp_path / "work"
    work.mkdir()
    (work / "loop").symlink_to("loop")
    (work / "dangling").symlink_to("nowhere/x")
    monkeypatch.chdir(work)
    for command in ("apply", "verify", "status", "unapply"):
        result = cli(command, "--target=" + name)
        assert result.exit_code == ExitCode.USAGE, (command, result.output)
        assert message in one_error_line(result.stderr), command
    assert sorted(p.name for p in work.iterdir()) == ["dangling", "loop"]  # the current directory is no target


def test_a_tilde_is_the_home_directory_for_every_command(cli, tmp_path, monkeypatch):
    """`--target=~/x` is not expanded by the shell; rocmpatch expands it, for every command alike."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    for command in ("apply", "verify", "status", "unapply", "apply"):
        result = cli(command, "--target=~/Megatron-LM")
        assert result.exit_code == 0, (command, result.output)
    assert (home / "Megatron-LM/.git").is_dir() and not (tmp_path / "~").exists()


# --- a corrupt rebase state -------------------------------------------------------------------


@pytest.mark.parametrize("text", [b"{not json", b"[]", b"{}", b'{"onto": 1}', b"\xff\xfe", b'{"outcomes": [1]}'])
def test_corrupt_rebase_state_is_invalid_input(cli, project, text):
    from rocmpatch.operations import rebase_state

    state = rebase_state.state_dir(project.lock_path.parent, project.release) / "state.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(text)
    result = cli("rebase", "--continue")
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert f"{state}: not a rebase state rocmpatch wrote" in one_error_line(result.stderr)
    assert "rocmpatch rebase --abort" in result.stderr
    assert state.read_bytes() == text
    assert cli("rebase", "--abort").exit_code == 0 and not state.parent.exists()


# --- example --write and symlinks -------------------------------------------------------------


@pytest.mark.parametrize("dangling", [True, False])
def test_example_write_never_follows_a_symlink(tmp_path, dangling):
    from click.testing import CliRunner

    from rocmpatch.cli import app

    directory, aimed_at = tmp_path / "dir", tmp_path / "elsewhere.sh"
    directory.mkdir()
    if not dangling:
        aimed_at.write_text("keep me\n")
    (directory / "pretrain_gpt_rocm.sh").symlink_to(aimed_at)
    result = CliRunner().invoke(app, ["example", "--write", str(directory)])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "already exists" in result.stderr
    assert os.path.islink(directory / "pretrain_gpt_rocm.sh")
    assert (not aimed_at.exists()) if dangling else aimed_at.read_text() == "keep me\n"


# --- a full disk ------------------------------------------------------------------------------
# RLIMIT_FSIZE (`ulimit -f`) makes a write past the limit fail for real, in rocmpatch (EFBIG) and in
# the git it starts (stopped by SIGXFSZ), without root; it stands in for a full disk.


def limited(max_bytes: int):
    def apply_limit() -> None:
        from tests.cli_process import default_sigint

        default_sigint()
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply_limit


def run_limited(max_bytes: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import sys

    from tests.cli_process import ROOT

    return subprocess.run([sys.executable, "-m", "rocmpatch", *args], env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, preexec_fn=limited(max_bytes))


LARGE = "".join(f"{os.urandom(24).hex()}\n" for _ in range(6000))  # 294 KB of text zlib cannot shrink much


@pytest.fixture
def large_upstream(tmp_path):
    """An upstream whose pinned commit holds a large file, and a series creating another."""
    from tests.fixtures import Upstream

    path = tmp_path / "large-upstream"
    repo = gitcmd.init_repo(path)
    write_files(path, {"README.md": "upstream\n", "pkg/a.py": "A = 1\n", "data/large.txt": LARGE})
    pin = commit_all(path, "pin")
    gitcmd.run(repo, "tag", "v1.0")
    upstream = Upstream(path, "v1.0", pin, gitcmd.tree_of(repo, pin), pin)
    location = make_series(tmp_path / "large-proj", upstream, patches=[("small", {"pkg/a.py": "A = 2\n"}),
                                                                        ("large", {"pkg/large.py": "# " + LARGE})])
    return upstream, location


def test_full_disk_while_fetching_into_the_cache(large_upstream, tmp_path):
    from rocmpatch import store

    upstream, location = large_upstream
    shutil.rmtree(store.commit_path(upstream.commit))  # cold: writing the lock fetched it
    result = run_limited(64 * 1024, "apply", "--target", str(tmp_path / "t"), "--series-dir", str(location.series_dir))
    assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
    assert "could not write" in one_error_line(result.stderr)
    cache = os.environ["ROCMPATCH_CACHE_DIR"]
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.*"))
    assert [p for p in os.listdir(os.path.join(cache, "commits")) if not p.endswith(".lock")] == []


def test_full_disk_while_copying_the_cache_into_a_new_target(large_upstream, tmp_path):
    """The cache on another file system than the target (/dev/shm): its objects are copied."""
    _, location = large_upstream
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the tests' temporary directory")
    cache = f"/dev/shm/rocmpatch-test-{os.getpid()}-{tmp_path.name}"
    env = {"ROCMPATCH_CACHE_DIR": cache}
    try:
        assert run_rocmpatch("fetch", "--series-dir", str(location.series_dir), env=env).returncode == 0
        result = run_limited(64 * 1024, "apply", "--target", str(tmp_path / "t"), "--series-dir", str(location.series_dir), env=env)
        assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
        assert "file too large" in one_error_line(result.stderr)
        assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.*"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_full_disk_while_writing_commits_changes_nothing(large_upstream, tmp_path):
    upstream, location = large_upstream
    target = tmp_path / "clone"  # --no-local: not the upstream's objects (the fixture wrote the patched blobs there)
    subprocess.run(["git", "clone", "-q", "--no-local", str(upstream.path), str(target)], check=True)
    before = tree_files(target)
    result = run_limited(64 * 1024, "apply", "--target", str(target), "--series-dir", str(location.series_dir))
    assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
    assert "file too large" in one_error_line(result.stderr)
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit
    assert {p: c for p, c in tree_files(target).items() if not p.startswith(".git/")} == \
        {p: c for p, c in before.items() if not p.startswith(".git/")}
    assert not (target / ".git/rocmpatch/journal.json").exists()
    assert run_rocmpatch("apply", "--target", str(target), "--series-dir", str(location.series_dir)).returncode == 0


# --- a move that fails part-way ---------------------------------------------------------------


def clean_at(target, commit: str) -> None:
    """The target is exactly `commit`: HEAD, index and files; no journal, no lock left."""
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == commit
    assert gitcmd.dirty_paths(repo) == []
    assert not (target / ".git/rocmpatch/journal.json").exists() and not (target / ".git/index.lock").exists()
    assert sorted(p.name for p in (target / ".git/rocmpatch").iterdir()) == ["lock"]


def hard_linked_clone(upstream, target):
    """A clone sharing the upstream's object files: it has the patched blobs already (the fixture
    wrote them there), so apply writes no large object and the move is what meets the limit."""
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    return target


def test_full_disk_in_the_middle_of_the_move_is_rolled_back(large_upstream, tmp_path):
    upstream, location = large_upstream
    target = hard_linked_clone(upstream, tmp_path / "clone")
    where = ["--target", str(target), "--series-dir", str(location.series_dir)]
    result = run_limited(64 * 1024, "apply", *where)
    assert result.returncode == ExitCode.MOVE_FAILED, result.stderr
    line = one_error_line(result.stderr)
    assert "failed part-way" in line and "it was rolled back, the target is as it was" in line
    clean_at(target, upstream.commit)
    assert not (target / "pkg/large.py").exists() and (target / "pkg/a.py").read_text() == "A = 1\n"
    assert run_rocmpatch("apply", *where).returncode == 0
    assert run_rocmpatch("verify", *where).returncode == 0


def test_a_killed_move_that_git_cannot_finish_is_rolled_back_by_the_next_command(large_upstream, tmp_path):
    upstream, location = large_upstream
    target = hard_linked_clone(upstream, tmp_path / "clone")
    where = ["--target", str(target), "--series-dir", str(location.series_dir)]
    killed = run_rocmpatch("apply", *where, env={"ROCMPATCH_TEST_INTERRUPT_AT": "index-held", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -9 and (target / ".git/rocmpatch/journal.json").exists()
    result = run_limited(64 * 1024, "unapply", *where)  # finishing the apply needs the large file: rolled back
    assert result.returncode == 0, result.stderr
    assert "rolled back the interrupted 'apply' first" in result.stdout
    clean_at(target, upstream.commit)
    result = run_limited(64 * 1024, "apply", *where)
    assert result.returncode == ExitCode.MOVE_FAILED, result.stderr
    clean_at(target, upstream.commit)
    assert run_rocmpatch("apply", *where).returncode == 0


def test_our_index_lock_is_known_through_another_name_of_the_target(project, upstream, tmp_path):
    target = hard_linked_clone(upstream, tmp_path / "clone")
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    (tmp_path / "link").symlink_to(target)
    series_dir = ["--series-dir", str(project.series_dir)]
    killed = run_rocmpatch("apply", "--target", str(tmp_path / "link"), *series_dir,
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": "index-held", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -9 and (target / ".git/index.lock").exists()
    again = run_rocmpatch("apply", "--target", str(target), *series_dir)
    assert again.returncode == 0 and "finished the interrupted 'apply'" in again.stdout, again.stderr
    assert not (target / ".git/index.lock").exists()


def test_a_name_too_long_for_the_file_system_is_refused_before_anything_changes(cli, upstream, tmp_path):
    location = make_series(tmp_path / "long", upstream, patches=[("long-name", {"pkg/" + "n" * 300 + ".py": "X = 1\n"})])
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    for where in (target, tmp_path / "new"):
        result = cli("apply", "--target", str(where), series_dir=location.series_dir)
        assert result.exit_code == ExitCode.TARGET_REFUSED, result.output
        assert "a name of 303 bytes" in one_error_line(result.stderr)
    clean_at(target, upstream.commit)
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new.*"))


def test_an_edit_to_an_assume_unchanged_file_is_the_users(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    subprocess.run(["git", "-C", str(target), "update-index", "--assume-unchanged", "pkg/a.py"], check=True)
    mine = (target / "pkg/a.py").read_text() + "# mine\n"
    (target / "pkg/a.py").write_text(mine)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED, result.output
    assert "has uncommitted changes: edits (pkg/a.py)" in one_error_line(result.stderr)
    assert (target / "pkg/a.py").read_text() == mine and not (target / ".git/rocmpatch/journal.json").exists()
    forced = cli("unapply", "--force", "--target", str(target))
    assert forced.exit_code == 0, forced.output
    assert b"+# mine" in next((target / ".git/rocmpatch").glob("saved-edits-*.patch")).read_bytes()


IN_SMALL_TMPFS = r'''
import json, os, subprocess, sys
mount, upstream, series_dir = sys.argv[1:4]
run = lambda *a, **k: subprocess.run(list(a), capture_output=True, text=True, **k)
assert run("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount).returncode == 0
target = os.path.join(mount, "t")
run("git", "clone", "-q", "--no-local", upstream, target, check=True)
rocmpatch = [sys.executable, "-m", "rocmpatch"]
where = ["--target", target, "--series-dir", series_dir]
run(*rocmpatch, "apply", "--dry-run", *where, check=True)  # the patched blobs: written now, with room
info = os.statvfs(mount)
used = (info.f_blocks - info.f_bfree) * info.f_frsize
run("mount", "-o", f"remount,size={used + 128 * 1024}", mount, check=True)  # no room for the large file
failed = run(*rocmpatch, "apply", *where)
status = run("git", "-C", target, "status", "--porcelain", "--untracked-files=all").stdout
head = run("git", "-C", target, "rev-parse", "HEAD").stdout.strip()
leftovers = sorted(os.listdir(os.path.join(target, ".git", "rocmpatch"))) + [p for p in ("index.lock",) if os.path.exists(os.path.join(target, ".git", p))]
run("mount", "-o", "remount,size=4m", mount, check=True)
again = run(*rocmpatch, "apply", *where)
print(json.dumps({"code": failed.returncode, "stderr": failed.stderr, "status": status, "head": head,
                  "leftovers": leftovers, "again": again.returncode}))
'''


def test_a_real_full_disk_in_the_middle_of_the_move_is_rolled_back(large_upstream, tmp_path):
    """ENOSPC for real: the target on a small tmpfs in a private mount namespace (root only)."""
    import json
    import sys

    from tests.cli_process import ROOT

    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -m to mount a small tmpfs")
    upstream, location = large_upstream
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["unshare", "-m", sys.executable, "-c", IN_SMALL_TMPFS, str(mount), str(upstream.path), str(location.series_dir)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["code"] == ExitCode.MOVE_FAILED, seen["stderr"]
    line = one_error_line(seen["stderr"])
    assert "KiB free" in line and "it was rolled back, the target is as it was" in line
    assert seen["status"] == "" and seen["head"] == upstream.commit and seen["leftovers"] == ["lock"]
    assert seen["again"] == 0


NEW_TARGET_IN_SMALL_TMPFS = r'''
import json, os, shutil, subprocess, sys
mount, series_dir = sys.argv[1:3]
run = lambda *a, **k: subprocess.run(list(a), capture_output=True, text=True, **k)
assert run("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mount).returncode == 0
rocmpatch = [sys.executable, "-m", "rocmpatch"]
target = os.path.join(mount, "t")
run(*rocmpatch, "apply", "--target", target, "--series-dir", series_dir, check=True)  # how much a whole new target takes
info = os.statvfs(mount)
needed = (info.f_blocks - info.f_bfree) * info.f_frsize
shutil.rmtree(target)
seen = []
for share in (0.3, 0.6, 0.8, 0.95):  # the disk fills while objects are copied, then while files are checked out
    run("mount", "-o", f"remount,size={int(needed * share)}", mount, check=True)
    failed = run(*rocmpatch, "apply", "--target", target, "--series-dir", series_dir)
    seen.append({"share": share, "code": failed.returncode, "stderr": failed.stderr, "left": sorted(os.listdir(mount))})
run("mount", "-o", "remount,size=8m", mount, check=True)
again = run(*rocmpatch, "apply", "--target", target, "--series-dir", series_dir)
print(json.dumps({"seen": seen, "again": again.returncode}))
'''


def test_a_real_full_disk_while_a_new_target_is_made_is_exit_8_and_leaves_nothing(large_upstream, tmp_path):
    """ENOSPC for real, at several points of making a new target (the cache on another file
    system): git does not always name the cause ("unable to write file"), yet it is the disk (exit
    8, as the copying of objects), never the upstream (6); nothing half-made is left."""
    import json
    import sys

    from tests.cli_process import ROOT

    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -m to mount a small tmpfs")
    _, location = large_upstream
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["unshare", "-m", sys.executable, "-c", NEW_TARGET_IN_SMALL_TMPFS, str(mount), str(location.series_dir)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for seen in result["seen"]:
        assert seen["code"] == ExitCode.ENVIRONMENT, seen
        line = one_error_line(seen["stderr"])
        assert "no space left" in line.lower() or "KiB free" in line, line
        assert seen["left"] == [], seen
    assert result["again"] == 0


# --- no child outlives a kill -----------------------------------------------------------------


def test_a_new_target_killed_while_built_is_cleaned_up_by_the_next_apply(project, tmp_path):
    target = tmp_path / "t"
    where = ["--target", str(target), "--series-dir", str(project.series_dir)]
    killed = run_rocmpatch("apply", *where, env={"ROCMPATCH_TEST_INTERRUPT_AT": "objects-copied", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -9
    assert not target.exists() and len(list(tmp_path.glob(".t.*.rocmpatch-partial"))) == 1
    assert run_rocmpatch("apply", *where).returncode == 0
    assert not list(tmp_path.glob(".t.*")) and run_rocmpatch("verify", *where).returncode == 0


def test_a_git_fetching_for_rocmpatch_dies_with_it(project, tmp_path):
    """kill -9 of rocmpatch alone (its git is not in the signal): the git it started to fetch, here
    waiting on an ssh transport that never answers, is stopped by the kernel (PR_SET_PDEATHSIG)
    instead of running on, orphaned."""
    import signal
    import sys
    import time
    import uuid

    from tests.cli_process import ROOT

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    token, started = f"rocmpatch-test-{uuid.uuid4()}", tmp_path / "ssh.started"
    ssh = f"{sys.executable} -c \"import sys; open({str(started)!r}, 'w').close(); sys.stdin.buffer.read()\""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMPATCH_CACHE_DIR": str(tmp_path / "cold-cache"), "GIT_SSH_COMMAND": ssh,
           "ROCMPATCH_TEST_TOKEN": token}
    rocmpatch = subprocess.Popen([sys.executable, "-m", "rocmpatch", "fetch", "--upstream-url", "ssh://nowhere.invalid/x.git",
                                  "--series-dir", str(project.series_dir)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if started.exists():
                break
            time.sleep(0.1)
        assert started.exists(), "git never started its ssh transport"
        os.kill(rocmpatch.pid, signal.SIGKILL)
        rocmpatch.wait()
        for _ in range(50):
            if not running_with(token):
                break
            time.sleep(0.1)
        assert running_with(token) == []
    finally:
        for pid in running_with(token):  # only what this test started
            os.kill(pid, signal.SIGKILL)


def running_with(token: str) -> list[int]:
    """Live processes whose environment holds ROCMPATCH_TEST_TOKEN=token (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and f"ROCMPATCH_TEST_TOKEN={token}".encode() in open(f"/proc/{entry}/environ", "rb").read().split(b"\0"):
                if open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


# --- a cache another user owns ----------------------------------------------------------------


def test_a_read_only_cache_owned_by_another_user_is_used(cli, project, tmp_path):
    """git refuses a repository another user owns ("dubious ownership") unless told it is safe:
    rocmpatch says so for its own cache entries only. Owned by nobody and mounted read-only
    (root only: chown, and a read-only bind mount that holds even for root)."""
    from tests.commands.test_hardening import in_read_only_mounts

    if os.geteuid() != 0:
        pytest.skip("needs root to give the cache to another user")
    assert cli("fetch").exit_code == 0
    cache = os.environ["ROCMPATCH_CACHE_DIR"]
    subprocess.run(["chown", "-R", "nobody", cache], check=True)
    series_dir = ["--series-dir", str(project.series_dir)]
    target = tmp_path / "t"
    result = in_read_only_mounts([cache], ["apply", "--target", str(target), *series_dir])
    assert result.returncode == 0, result.stderr
    assert "is not writable: the series is applied in the new target instead" in result.stderr
    for command in (["check"], ["lock", "--check"], ["verify", "--target", str(target)], ["fetch"]):
        result = in_read_only_mounts([cache], [*command, *series_dir])
        assert result.returncode == 0, (command, result.stderr)
    other = tmp_path / "other"  # a target of another user is not rocmpatch's to trust
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(["chown", "-R", "nobody", str(other)], check=True)
    refused = run_rocmpatch("status", "--target", str(other), *series_dir)
    assert refused.returncode == ExitCode.TARGET_REFUSED, refused.stderr
    assert "belongs to another user" in one_error_line(refused.stderr)
