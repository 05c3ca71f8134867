"""Verify never says yes wrongly, and odd targets, caches and environments give a clear,
documented exit code (issue 13). Real git repositories throughout."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from rocmpatch import gitcmd
from rocmpatch.errors import ExitCode
from tests.cli_process import run_rocmpatch
from tests.fixtures import commit_all


def applied(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    return target


def rewrite_lock(project, field: str, value: str) -> None:
    text = project.lock_path.read_text()
    old = text.split(f"{field}: ")[1].split()[0]
    project.lock_path.write_text(text.replace(f"{field}: {old}", f"{field}: {value}"))


def cache_files() -> set[str]:
    root = os.environ["ROCMPATCH_CACHE_DIR"]
    return {os.path.join(d, f) for d, _, files in os.walk(root) for f in files if "/logs" not in d}


def test_wrong_patched_tree_in_lock_fails_verify(cli, project, upstream, tmp_path):
    target = applied(cli, tmp_path)
    rewrite_lock(project, "patched_tree", upstream.tree)  # a real tree, but not the patched one
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    problems = json.loads(result.stdout)["lock_problems"]
    assert any("patched_tree is " + upstream.tree in p for p in problems), problems
    rewrite_lock(project, "patched_tree", "1" * 40)  # no such object at all
    result = cli("verify", "--target", str(target))
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    assert "lock: " in result.stdout and "patched_tree is 1111" in result.stdout


def test_wrong_pin_commit_in_lock_fails_verify(cli, project, upstream, tmp_path):
    target = applied(cli, tmp_path)
    rewrite_lock(project, "commit", upstream.later)
    result = cli("verify", "--target", str(target))
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    assert result.stdout.startswith("not based on the pin: HEAD")


def test_wrong_pin_tree_in_lock_fails_verify(cli, project, upstream, tmp_path):
    target = applied(cli, tmp_path)
    later_tree = gitcmd.tree_of(gitcmd.open_repo(upstream.path), upstream.later)
    text = project.lock_path.read_text()
    project.lock_path.write_text(text.replace(f"tree: {upstream.tree}", f"tree: {later_tree}"))
    result = cli("verify", "--target", str(target))
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    assert f"upstream.tree is {later_tree}" in result.stdout


@pytest.mark.parametrize("name", ["new\nline.txt", "tab\there.txt", "bytes-\udcff.txt"])
def test_untracked_file_with_any_name(cli, tmp_path, name):
    target = applied(cli, tmp_path)
    (target / os.fsencode(name).decode("utf-8", "surrogateescape")).write_text("x\n")
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    differences = json.loads(result.stdout)["differences"]
    assert [d["kind"] for d in differences] == ["added"] and len(differences) == 1


def test_verify_of_unrelated_repository_says_so_and_writes_nothing(cli, tmp_path):
    applied(cli, tmp_path)  # warms the cache
    other = tmp_path / "other"
    gitcmd.init_repo(other)
    (other / "f.txt").write_text("unrelated\n")
    commit_all(other, "unrelated")
    before = cache_files()
    result = cli("verify", "--target", str(other))
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    assert result.stdout.startswith("not based on the pin: HEAD")
    assert cache_files() == before


def test_check_and_lock_check_write_nothing_into_the_cache(cli, tmp_path):
    assert cli("fetch").exit_code == 0
    before = cache_files()
    assert cli("check").exit_code == 0
    assert cli("lock", "--check").exit_code == 0
    assert cli("apply", "--dry-run", "--target", str(tmp_path / "t")).exit_code == 0
    assert cache_files() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_warm_cache_still_checks(cli, tmp_path):
    assert cli("fetch").exit_code == 0
    root = os.environ["ROCMPATCH_CACHE_DIR"]
    subprocess.run(["chmod", "-R", "a-w", root], check=True)
    try:
        result = cli("check")
        assert result.exit_code == 0, result.output
        assert cli("lock", "--check").exit_code == 0
    finally:
        subprocess.run(["chmod", "-R", "u+w", root], check=True)


def test_bare_repository_target(cli, tmp_path):
    bare = tmp_path / "bare.git"
    gitcmd.init_repo(bare, bare=True)
    for command in ("apply", "unapply", "verify", "status"):
        result = cli(command, "--target", str(bare))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (command, result.output)
        assert "is a bare git repository" in result.stderr, command


def test_user_commit_on_top_of_the_series(cli, tmp_path):
    target = applied(cli, tmp_path)
    (target / "docs/guide.md").write_text("mine\n")
    mine = commit_all(target, "my own change")
    status = cli("status", "--target", str(target), "--json")
    assert status.exit_code == 0
    report = json.loads(status.stdout)
    assert report["user_commits"] == [mine] and report["at_pin"]
    assert {p["state"] for p in report["patches"]} == {"applied"}
    for args in (["apply"], ["unapply"]):
        result = cli(*args, "--target", str(target))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (args, result.output)
        assert "1 commit(s) of your own on top of the series" in result.stderr
        assert "format-patch" in result.stderr and "unapply --force" in result.stderr
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == mine
    assert "1 commit(s) of your own" in cli("status", "--target", str(target)).stdout
    # --force saves the commit's change as a patch first (it stays in the reflog, too), then unapplies.
    result = cli("unapply", "--force", "--target", str(target))
    assert result.exit_code == 0, result.output
    assert f"saved your commit {mine[:12]}" in result.stdout
    saved = next((target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    assert b"+mine" in saved.read_bytes() and b"my own change" in saved.read_bytes()
    assert cli("apply", "--target", str(target)).exit_code == 0
    subprocess.run(["git", "-C", str(target), "apply", str(saved)], check=True)
    assert (target / "docs/guide.md").read_text() == "mine\n"


def test_git_missing_is_exit_8_for_every_command(cli, project, tmp_path):
    target = applied(cli, tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    for args in (["fetch"], ["check"], ["lock", "--check"], ["verify", "--target", str(target)], ["status", "--target", str(target)]):
        result = run_rocmpatch(*args, "--series-dir", str(project.series_dir), env={"PATH": str(empty)})
        assert result.returncode == ExitCode.ENVIRONMENT, (args, result.stderr)
        assert result.stderr.startswith("rocmpatch: error: git was not found on PATH"), args


def test_bad_lock_wait_is_a_usage_error(cli, tmp_path, monkeypatch):
    target = applied(cli, tmp_path)
    monkeypatch.setenv("ROCMPATCH_LOCK_WAIT", "abc")
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "ROCMPATCH_LOCK_WAIT='abc'" in result.stderr


@pytest.mark.parametrize("gpus", ["a;b", "a", "0,0", "²"])
def test_bad_gpus_is_a_usage_error(tmp_path, gpus):
    from click.testing import CliRunner

    from rocmpatch.cli import app

    result = CliRunner().invoke(app, ["smoke", "--target", str(tmp_path), "--gpus", gpus])
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "--gpus" in result.stderr


def test_lock_url_that_looks_like_an_option_with_a_warm_cache(cli, project, upstream, tmp_path):
    assert cli("fetch").exit_code == 0
    project.lock_path.write_text(project.lock_path.read_text().replace(f"url: {upstream.url}", "url: --mirror=fetch"))
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == ExitCode.UPSTREAM_ERROR, result.output
    assert "upstream.lock url: refusing URL '--mirror=fetch'" in result.stderr
    assert not (tmp_path / "t").exists() and not list(tmp_path.glob(".t.*"))


def test_new_target_gets_the_umask_mode(project, tmp_path):
    target = tmp_path / "t"
    result = subprocess.run(["sh", "-c", 'umask 022 && exec "$@"', "sh", *run_args("apply", "--target", str(target), "--series-dir", str(project.series_dir))],
                            env=child_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert oct(target.stat().st_mode & 0o777) == oct(0o755)


def test_stale_partial_directories_are_removed(cli, project, tmp_path):
    import shutil

    from rocmpatch import store
    from tests.fixtures import lock_of

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".t.{dead.pid}.abcd_123.rocmpatch-partial"
    live = tmp_path / f".t.{os.getpid()}.abcd_124.rocmpatch-partial"
    other = tmp_path / f".other.{dead.pid}.abcd_125.rocmpatch-partial"
    for directory in (stale, live, other):
        (directory / ".git").mkdir(parents=True)
    commit = lock_of(project).upstream.commit
    shutil.rmtree(store.commit_path(commit))  # cold cache, with a leftover of a killed fetch
    stale_cache = store.commit_path(commit).parent / f".{commit}.xyz.partial"
    stale_cache.mkdir()
    assert cli("apply", "--target", str(tmp_path / "t")).exit_code == 0
    assert not stale.exists() and live.exists() and other.exists()
    assert not stale_cache.exists()


def test_ctrl_c_after_the_work_is_done_exits_0(project, tmp_path):
    target = tmp_path / "t"
    result = run_rocmpatch("apply", "--target", str(target), "--series-dir", str(project.series_dir),
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": "applied"})
    assert result.returncode == 0, result.stderr
    assert "interrupted after the work was done" in result.stderr
    assert run_rocmpatch("verify", "--target", str(target), "--series-dir", str(project.series_dir)).returncode == 0


@pytest.mark.parametrize("point", ["started", "command-line", "command-started"])
def test_ctrl_c_before_the_command_runs_is_130_in_one_line(project, tmp_path, point):
    """While Python loads rocmpatch, while Click reads the command line, before the command's own
    handling: never Click's `Aborted!` (exit 1), never a traceback."""
    target = tmp_path / "t"
    result = run_rocmpatch("apply", "--target", str(target), "--series-dir", str(project.series_dir),
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": point})
    assert result.returncode == ExitCode.INTERRUPTED, result.stderr
    assert result.stderr == "rocmpatch: interrupted\n" and result.stdout == ""
    assert not target.exists()


@pytest.mark.parametrize("edit, code", [(False, ExitCode.OK), (True, ExitCode.CHECK_FAILED)])
def test_ctrl_c_once_the_answer_is_given_changes_nothing(cli, project, tmp_path, edit, code):
    """A Ctrl-C after the command printed its answer: its code, not 130 after printing success."""
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    if edit:
        (target / "pkg/a.py").write_text("edited\n")
    result = run_rocmpatch("verify", "--target", str(target), "--series-dir", str(project.series_dir),
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": "answered"})
    assert result.returncode == code, result.stderr
    assert ("verified" in result.stdout) == (not edit) and "interrupted" not in result.stderr


def test_ctrl_c_while_an_error_is_reported_keeps_the_errors_code(project, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain/file").write_text("not a checkout\n")
    result = run_rocmpatch("verify", "--target", str(tmp_path / "plain"), "--series-dir", str(project.series_dir),
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": "answered"})
    assert result.returncode == ExitCode.TARGET_REFUSED, result.stderr
    assert "is a directory but no git checkout" in result.stderr and "interrupted" not in result.stderr


def test_ctrl_c_after_apply_printed_success_exits_0(project, tmp_path):
    target = tmp_path / "t"
    result = run_rocmpatch("apply", "--target", str(target), "--series-dir", str(project.series_dir),
                           env={"ROCMPATCH_TEST_INTERRUPT_AT": "answered"})
    assert result.returncode == 0, result.stderr
    assert f"created {target}" in result.stdout and "interrupted" not in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_target_is_refused_before_anything_changes(cli, project, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    subprocess.run(["chmod", "-R", "a-w", str(target)], check=True)
    try:
        result = cli("apply", "--target", str(target))
        assert result.exit_code == ExitCode.TARGET_REFUSED, result.output
        assert "not writable" in result.stderr
        assert not (target / ".git/rocmpatch").exists()
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(target)], check=True)
    subprocess.run(["chmod", "a-w", str(tmp_path)], check=True)
    try:
        result = cli("apply", "--target", str(tmp_path / "new"))
        assert result.exit_code == ExitCode.TARGET_REFUSED, result.output
        assert f"{tmp_path}: not writable" in result.stderr
    finally:
        subprocess.run(["chmod", "u+w", str(tmp_path)], check=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_unwritable_cache_says_what(cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o555)
    monkeypatch.delenv("ROCMPATCH_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    result = cli("fetch")
    assert result.exit_code == ExitCode.ENVIRONMENT, result.output
    assert f"{home}/.cache: permission denied" in result.stderr


def run_args(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "rocmpatch", *args]


def child_env() -> dict[str, str]:
    from tests.cli_process import ROOT

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def in_read_only_mounts(paths: list, command: list[str]) -> subprocess.CompletedProcess:
    """Run rocmpatch with `paths` bind-mounted read-only (EROFS even for root), in a private mount
    namespace; skip where that is not possible."""
    import shlex

    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -m for read-only bind mounts")
    mounts = "".join(f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(p))} && mount -o remount,ro,bind {shlex.quote(str(p))} && " for p in paths)
    return subprocess.run(["unshare", "-m", "sh", "-c", mounts + 'exec "$@"', "sh", *run_args(*command)],
                          env=child_env(), capture_output=True, text=True)


def test_read_only_mounts_target_parent_and_cache(cli, project, upstream, tmp_path, monkeypatch):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    parent = tmp_path / "parent"
    parent.mkdir()
    series_dir = ["--series-dir", str(project.series_dir)]
    cache = os.environ["ROCMPATCH_CACHE_DIR"]
    result = in_read_only_mounts([target], ["apply", "--target", str(target), *series_dir])
    assert result.returncode == ExitCode.TARGET_REFUSED, result.stderr
    assert f"{target}: not writable" in result.stderr and not (target / ".git/rocmpatch").exists()
    result = in_read_only_mounts([parent], ["apply", "--target", str(parent / "new"), *series_dir])
    assert result.returncode == ExitCode.TARGET_REFUSED, result.stderr
    assert f"{parent}: not writable" in result.stderr
    for command in (["check"], ["lock", "--check"], ["verify", "--target", str(target)]):
        result = in_read_only_mounts([cache, target], [*command, *series_dir])
        assert result.returncode in (0, 1) and "error" not in result.stderr, (command, result.stderr)
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(parent / "cache"))
    result = in_read_only_mounts([parent], ["fetch", *series_dir])
    assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
    assert f"{parent}/cache: not writable: read-only file system" in result.stderr
