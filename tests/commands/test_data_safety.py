"""Issue 13, "data lost, or input escaping the target": each case against real git repositories,
real processes and real signals."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from rocmpatch import gitcmd
from rocmpatch.errors import ExitCode
from tests.cli_process import ROOT
from tests.fixtures import make_series, write_files

ROCMPATCH = [sys.executable, "-m", "rocmpatch"]


def clone_at_pin(upstream, target: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    return target


def replace_patch(location, name: str, text: bytes) -> None:
    """Swap a locked patch's bytes for `text`, updating only its sha256 in the lock (so the
    lock itself never has to parse the new patch)."""
    path = location.series_dir / name
    old = hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_bytes(text)
    lock = location.lock_path.read_text()
    assert old in lock
    location.lock_path.write_text(lock.replace(old, hashlib.sha256(text).hexdigest()))


# 1. an ignored file where the series creates one -------------------------------------------


def test_ignored_file_where_the_series_creates_one_is_refused(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    assert cli("unapply", "--target", str(target)).exit_code == 0
    with open(target / ".git/info/exclude", "a") as exclude:
        exclude.write("pkg/new.py\n")
    (target / "pkg/new.py").write_text("mine\n")
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED, result.stdout
    assert "pkg/new.py" in result.stderr and "nothing was changed" in result.stderr
    assert (target / "pkg/new.py").read_text() == "mine\n"
    repo = gitcmd.open_repo(target)
    assert gitcmd.dirty_paths(repo) == [] and not (target / ".git/rocmpatch/journal.json").exists()


# 2. killed in the middle of a move ------------------------------------------------------------


def big_series(tmp_path, upstream):
    """A series whose move keeps `git read-tree -u` busy long enough to be killed in the middle:
    many new files and a large one (cut short when git dies writing it)."""
    files = {f"gen/m{i:04d}.py": "".join(f"x{j} = {i * j}\n" for j in range(12)) for i in range(120)}
    files["gen/large.py"] = "".join(f"value_{j} = {j}  # a long line to make the file large\n" for j in range(6000))
    return make_series(tmp_path / "big", upstream, patches=[("many-files", files)])


def _git_running_in_group(group: int, what: bytes) -> bool:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group and what in Path(entry.path, "cmdline").read_bytes():
                    return True
            except (OSError, ProcessLookupError):
                continue
    return False


def run_until_killed(args: list[str], sig: int, delay: float) -> int:
    """Start rocmpatch in its own process group; once its journal is written and `git read-tree`
    runs (the move), wait `delay` seconds and send `sig` to the whole group, git included."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMPATCH_TEST_ANNOUNCE": "1"}
    child = subprocess.Popen([*ROCMPATCH, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        for line in child.stderr:
            if b"at journal-written" in line:
                while child.poll() is None and not _git_running_in_group(child.pid, b"read-tree"):
                    pass
                time.sleep(delay)
                try:
                    os.killpg(child.pid, sig)
                except ProcessLookupError:
                    pass
                break
        child.stderr.read()
        return child.wait(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def test_kill_during_the_move_is_finished_by_the_next_run(tmp_path, upstream):
    """SIGKILL or Ctrl-C (SIGINT) to the process group while git moves the files: the next
    apply / unapply finishes the move (a file cut short, a stale index.lock are not user edits)."""
    location = big_series(tmp_path, upstream)
    target = clone_at_pin(upstream, tmp_path / "clone")
    where = ["--target", str(target), "--series-dir", str(location.series_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(13)
    for command, sig in (("apply", signal.SIGKILL), ("unapply", signal.SIGKILL), ("apply", signal.SIGINT)):
        delay = rng.uniform(0.0, 0.03)
        status = run_until_killed([command, *where], sig, delay)
        again = subprocess.run([*ROCMPATCH, command, *where], env=env, capture_output=True, text=True)
        assert again.returncode == 0, (command, sig, delay, status, again.stderr)
        repo = gitcmd.open_repo(target)
        assert gitcmd.dirty_paths(repo) == [], (command, sig, delay, status)
        assert not (target / ".git/rocmpatch/journal.json").exists() and not (target / ".git/index.lock").exists()
        applied = gitcmd.tree_of(repo, "HEAD") == project_lock(location).patched_tree
        assert applied if command == "apply" else gitcmd.head_commit(repo) == upstream.commit


def test_kill_while_git_lists_the_users_changes_leaves_no_lock(tmp_path, upstream):
    """unapply asks `git status` for the user's changes before its move (no journal yet): a kill
    of the process group then must not leave a .git/index.lock that no journal records (the next
    run would answer BUSY): rocmpatch's git status takes no optional lock."""
    location = big_series(tmp_path, upstream)
    target = clone_at_pin(upstream, tmp_path / "clone")
    where = ["--target", str(target), "--series-dir", str(location.series_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([*ROCMPATCH, "apply", *where], env=env, capture_output=True).returncode == 0
    for path in (target / "gen").iterdir():
        os.utime(path)  # stat data git status refreshes (and would write back) for each
    child = subprocess.Popen([*ROCMPATCH, "unapply", *where], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    lock, journal = target / ".git/index.lock", target / ".git/rocmpatch/journal.json"
    unrecorded, seen, turn = False, False, 0
    while child.poll() is None:  # until git status has run, or an index.lock appears that no journal records
        if lock.exists() and not journal.exists():
            unrecorded = True
            break
        turn += 1
        if turn % 16 == 0:  # /proc is slow to scan: the lock is looked for in between
            running = _git_running_in_group(child.pid, b"status")
            if seen and not running:
                break
            seen = seen or running
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait(timeout=60)
    assert not unrecorded, "git status held .git/index.lock"
    again = subprocess.run([*ROCMPATCH, "unapply", *where], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


def test_half_written_file_and_our_index_lock_are_not_user_edits(project, upstream, tmp_path):
    """What a SIGKILL inside `git read-tree -u` leaves: a new file cut short, and the index.lock
    rocmpatch holds during the move (its identity is in the journal)."""
    from tests.cli_process import run_rocmpatch

    target = clone_at_pin(upstream, tmp_path / "clone")
    args = ("apply", "--target", str(target), "--series-dir", str(project.series_dir))
    killed = run_rocmpatch(*args, env={"ROCMPATCH_TEST_INTERRUPT_AT": "index-held", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -signal.SIGKILL and (target / ".git/index.lock").exists()
    patched = gitcmd.TreeReader(gitcmd.open_repo(target), project_lock(project).patched_tree)
    (target / "pkg/a.py").write_bytes(patched.read("pkg/a.py")[:100])  # git died writing it
    again = run_rocmpatch(*args)
    assert again.returncode == 0, again.stderr
    assert "finished the interrupted 'apply'" in again.stdout
    assert not (target / ".git/index.lock").exists()
    assert run_rocmpatch("verify", *args[1:]).returncode == 0


def test_an_index_lock_rocmpatch_did_not_create_is_never_removed(project, upstream, tmp_path):
    """Another git's index.lock (running, or killed on its own): apply refuses (BUSY) before
    changing anything, and a pending journal is not finished past it, until the lock goes."""
    from tests.cli_process import run_rocmpatch

    target = clone_at_pin(upstream, tmp_path / "clone")
    args = ("apply", "--target", str(target), "--series-dir", str(project.series_dir))
    lock = target / ".git/index.lock"
    lock.write_bytes(b"another git's")
    refused = run_rocmpatch(*args)
    assert refused.returncode == ExitCode.BUSY, refused.stderr
    assert "rocmpatch did not create it" in refused.stderr and lock.read_bytes() == b"another git's"
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit and gitcmd.dirty_paths(repo) == []
    assert not (target / ".git/rocmpatch/journal.json").exists()
    lock.unlink()
    killed = run_rocmpatch(*args, env={"ROCMPATCH_TEST_INTERRUPT_AT": "worktree-updated", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -signal.SIGKILL
    (target / ".git/index.lock").unlink()  # ours: replaced by another git's
    lock.write_bytes(b"another git's")
    for command in ("apply", "unapply"):
        refused = run_rocmpatch(command, *args[1:])
        assert refused.returncode == ExitCode.BUSY, refused.stderr
        assert lock.read_bytes() == b"another git's" and (target / ".git/rocmpatch/journal.json").exists()
    lock.unlink()
    again = run_rocmpatch(*args)
    assert again.returncode == 0 and "finished the interrupted 'apply'" in again.stdout, again.stderr
    assert run_rocmpatch("verify", *args[1:]).returncode == 0


def test_a_real_edit_after_a_kill_is_still_refused_and_force_saves_it(project, upstream, tmp_path):
    from tests.cli_process import run_rocmpatch

    target = clone_at_pin(upstream, tmp_path / "clone")
    where = ("--target", str(target), "--series-dir", str(project.series_dir))
    run_rocmpatch("apply", *where, env={"ROCMPATCH_TEST_INTERRUPT_AT": "journal-written", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    (target / "pkg/a.py").write_text("my own edit\n")
    refused = run_rocmpatch("apply", *where)
    assert refused.returncode == ExitCode.TARGET_REFUSED and "pkg/a.py holds edits made since" in refused.stderr
    forced = run_rocmpatch("unapply", "--force", *where)
    assert forced.returncode == 0, forced.stderr
    assert not (target / ".git/rocmpatch/journal.json").exists()
    saved = next((target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    assert b"+my own edit" in saved.read_bytes() and str(saved) in forced.stdout
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit and gitcmd.dirty_paths(repo) == []


def test_kill_while_force_discards_edits_is_cleared_by_the_next_force(cli, project, upstream, tmp_path):
    from tests.cli_process import run_rocmpatch

    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    (target / "pkg/a.py").write_text("mine\n")
    where = ("--target", str(target), "--series-dir", str(project.series_dir))
    killed = run_rocmpatch("unapply", "--force", *where, env={"ROCMPATCH_TEST_INTERRUPT_AT": "journal-written", "ROCMPATCH_TEST_SIGNAL": "KILL"})
    assert killed.returncode == -signal.SIGKILL and "saved your uncommitted edits to" in killed.stderr
    assert run_rocmpatch("unapply", *where).returncode == ExitCode.TARGET_REFUSED
    forced = run_rocmpatch("unapply", "--force", *where)
    assert forced.returncode == 0, forced.stderr
    assert not (target / ".git/rocmpatch/journal.json").exists()
    assert all(b"+mine" in saved.read_bytes() for saved in (target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


# 3. unapply --force with a nested repository ---------------------------------------------------


def test_force_keeps_nested_repository_and_saves_the_rest(cli, upstream, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    (target / "pkg/a.py").write_text("mine\n")
    nested = target / "vendor/lib"
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    (nested / "code.py").write_text("precious\n")
    result = cli("unapply", "--target", str(target), "--force")
    assert result.exit_code == 0, result.stderr
    saved = next((target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    assert str(saved) in result.stdout and str(saved) in result.stderr  # said before discarding
    assert "kept the nested git repository vendor/lib" in result.stdout
    text = saved.read_bytes()
    assert b"+mine" in text and b"vendor/lib" not in text
    assert (nested / "code.py").read_text() == "precious\n" and (nested / ".git").is_dir()
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


# 4. a symlink planted where rocmpatch writes a temporary file -------------------------------


def test_planted_symlinks_in_state_dir_are_never_followed(cli, upstream, tmp_path):
    target = clone_at_pin(upstream, tmp_path / "clone")
    outside = tmp_path / "outside.txt"
    state = target / ".git/rocmpatch"
    state.mkdir()
    (state / ".journal.json.rocmpatch-tmp").symlink_to(outside)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0, result.stderr
    assert not outside.exists()
    # A lock file, or the state directory itself, as a symlink: refused, nothing written outside.
    assert cli("unapply", "--target", str(target)).exit_code == 0
    (state / "lock").unlink()
    (state / "lock").symlink_to(outside)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED and "lock" in result.stderr
    assert not outside.exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "lock").unlink()
    state.rename(tmp_path / "old-state")
    state.symlink_to(elsewhere)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED and "symlink" in result.stderr
    assert list(elsewhere.iterdir()) == []


# 5. symlinks, gitlinks and unknown modes a patch creates ----------------------------------------


def new_file_patch(path: str, mode: str, content: str) -> bytes:
    return (f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{content}\n"
            "\\ No newline at end of file\n").encode()


def test_patch_modes_outside_files_are_invalid_input(cli, upstream, tmp_path):
    location = make_series(tmp_path / "modes", upstream, patches=[("ok", {"README.md": "changed\n"})])
    cases = {
        "/outside": ("link", "120000", "/outside"),
        "../../outside": ("pkg/link", "120000", "../../outside"),
        ".git": ("link", "120000", ".git/config"),
        "gitlink": ("sub", "160000", "Subproject commit " + "1" * 40),
        "unknown mode": ("f", "abc", "x"),
    }
    for expected, (path, mode, content) in cases.items():
        replace_patch(location, "0001-ok.patch", new_file_patch(path, mode, content))
        for command in (["lock", "--check"], ["check"], ["apply", "--target", str(tmp_path / "t")]):
            result = cli(*command, series_dir=location.series_dir)
            assert result.exit_code == ExitCode.INVALID_INPUT, (expected, command, result.stdout, result.stderr)
            assert "0001-ok.patch" in result.stderr, (expected, result.stderr)
        assert not (tmp_path / "t").exists()


def test_symlink_inside_the_tree_is_applied_and_verified(cli, upstream, tmp_path):
    location = make_series(tmp_path / "linky", upstream, patches=[("ok", {"README.md": "changed\n"})])
    replace_patch(location, "0001-ok.patch", new_file_patch("pkg/link.py", "120000", "a.py"))
    assert cli("lock", series_dir=location.series_dir).exit_code == 0
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), series_dir=location.series_dir).exit_code == 0
    assert os.readlink(target / "pkg/link.py") == "a.py"
    assert cli("verify", "--target", str(target), series_dir=location.series_dir).exit_code == 0


# 6. verify compares content, mode and type --------------------------------------------------------


def test_verify_sees_symlink_swaps_and_mode_changes(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    copy = tmp_path / "copy-of-b.py"
    copy.write_bytes((target / "pkg/b.py").read_bytes())
    (target / "pkg/b.py").unlink()
    (target / "pkg/b.py").symlink_to(copy)
    (target / "README.md").chmod(0o755)
    subprocess.run(["git", "-C", str(target), "config", "core.fileMode", "false"], check=True)
    (target / "pkg/a.py").write_text("edited\n")
    subprocess.run(["git", "-C", str(target), "update-index", "--assume-unchanged", "pkg/a.py"], check=True)
    objects = sorted((target / ".git/objects").rglob("*"))
    result = cli("verify", "--target", str(target), "--json")
    assert sorted((target / ".git/objects").rglob("*")) == objects  # verify writes nothing to the target
    assert result.exit_code == ExitCode.CHECK_FAILED, result.stdout
    kinds = {d["path"]: d["kind"] for d in json.loads(result.stdout)["differences"]}
    assert kinds == {"pkg/b.py": "type-changed", "README.md": "mode-changed", "pkg/a.py": "edited"}


def test_verify_sees_mode_and_edits_through_a_stat_clean_index(cli, tmp_path):
    """No flags in the index: verify starts from its stat data (as git status does) and still sees
    a chmod under core.fileMode=false and an edit that keeps the file's size."""
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    subprocess.run(["git", "-C", str(target), "status", "--porcelain"], check=True, capture_output=True)  # a fresh stat cache
    (target / "README.md").chmod(0o755)
    subprocess.run(["git", "-C", str(target), "config", "core.fileMode", "false"], check=True)
    text = (target / "pkg/b.py").read_text()
    (target / "pkg/b.py").write_text(text.replace("return 1\n", "return 9\n", 1))
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED, result.stdout
    kinds = {d["path"]: d["kind"] for d in json.loads(result.stdout)["differences"]}
    assert kinds == {"README.md": "mode-changed", "pkg/b.py": "edited"}


# 7. no program configured in the target runs -------------------------------------------------------


def test_programs_configured_in_the_target_never_run(cli, upstream, tmp_path):
    target = clone_at_pin(upstream, tmp_path / "clone")
    marks = tmp_path / "marks"
    marks.mkdir()

    def command(name: str) -> str:
        return f"touch {marks}/{name}; cat"

    config = {
        "core.fsmonitor": command("fsmonitor"),
        "filter.evil.clean": command("clean"), "filter.evil.smudge": command("smudge"), "filter.evil.process": command("process"),
        "diff.evil.textconv": command("textconv"), "diff.evil.command": command("diffcommand"), "diff.external": command("external"),
        "trailer.Rocmpatch-Patch.cmd": command("trailer"), "trailer.Rocmpatch-Patch-Sha256.command": command("trailercommand"),
    }
    for key, value in config.items():
        subprocess.run(["git", "-C", str(target), "config", key, value], check=True)
    (target / ".git/info/attributes").write_text("* filter=evil diff=evil\n")
    hooks = target / ".git/hooks"
    for hook in ("post-checkout", "reference-transaction", "post-index-change", "pre-commit", "post-commit"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (hooks / hook).chmod(0o755)
    assert cli("apply", "--target", str(target)).exit_code == 0
    assert cli("verify", "--target", str(target)).exit_code == 0
    assert cli("status", "--target", str(target)).exit_code == 0
    write_files(target, {"pkg/a.py": "edited\n"})
    assert cli("verify", "--target", str(target)).exit_code == ExitCode.CHECK_FAILED
    assert cli("unapply", "--target", str(target), "--force").exit_code == 0
    assert sorted(p.name for p in marks.iterdir()) == []


# 8. the lock's url is checked even with a warm cache ---------------------------------------------


def test_lock_url_with_a_transport_helper_is_refused_with_a_warm_cache(cli, project, upstream, tmp_path):
    assert cli("apply", "--target", str(tmp_path / "warm")).exit_code == 0  # fills the cache
    evil = f"ext::sh -c touch% {tmp_path}/pwned"
    project.lock_path.write_text(project.lock_path.read_text().replace(upstream.url, evil))
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == ExitCode.UPSTREAM_ERROR, (result.stdout, result.stderr)
    assert "ext::" in result.stderr
    assert not (tmp_path / "t").exists() and not (tmp_path / "pwned").exists()
    assert not list(tmp_path.glob(".t.*"))


# 9. git copies ---------------------------------------------------------------------------------------


COPY = (b"diff --git a/pkg/a.py b/pkg/c.py\nsimilarity index 90%\ncopy from pkg/a.py\ncopy to pkg/c.py\n"
        b"--- a/pkg/a.py\n+++ b/pkg/c.py\n@@ -1,2 +1,2 @@\n def a0():\n-    return 0\n+    return 100\n")


def test_copy_keeps_its_source(cli, upstream, tmp_path):
    location = make_series(tmp_path / "copy", upstream, patches=[("ok", {"README.md": "changed\n"})])
    replace_patch(location, "0001-ok.patch", COPY)
    assert cli("lock", series_dir=location.series_dir).exit_code == 0
    target = tmp_path / "t"
    result = cli("apply", "--target", str(target), series_dir=location.series_dir)
    assert result.exit_code == 0, result.stderr
    original = (upstream.path / "pkg/a.py").read_text()
    assert (target / "pkg/a.py").read_text() == original
    assert (target / "pkg/c.py").read_text() == original.replace("return 0\n", "return 100\n", 1)
    assert cli("verify", "--target", str(target), series_dir=location.series_dir).exit_code == 0


def test_copy_outside_the_tree_is_refused(cli, upstream, tmp_path):
    location = make_series(tmp_path / "copy", upstream, patches=[("ok", {"README.md": "changed\n"})])
    for bad in (COPY.replace(b"copy to pkg/c.py", b"copy to ../../x"), COPY.replace(b"copy from pkg/a.py", b"copy from ../../etc/passwd")):
        replace_patch(location, "0001-ok.patch", bad)
        for command in (["lock", "--check"], ["apply", "--target", str(tmp_path / "t")]):
            result = cli(*command, series_dir=location.series_dir)
            assert result.exit_code == ExitCode.INVALID_INPUT, (command, result.stdout, result.stderr)
        assert not (tmp_path / "t").exists() and not (tmp_path / "x").exists()


def project_lock(location):
    from tests.fixtures import lock_of

    return lock_of(location)
