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


# --- a corrupt rebase state -------------------------------------------------------------------


@pytest.mark.parametrize("text", [b"{not json", b"[]", b"{}", b'{"onto": 1}', b"\xff\xfe", b'{"outcomes": [1]}'])
def test_corrupt_rebase_state_is_invalid_input(cli, project, text):
    from rocmpatch.operations import rebase

    state = rebase.state_dir(project.lock_path.parent, project.release) / "state.json"
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
