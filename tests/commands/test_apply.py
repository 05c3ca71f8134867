from __future__ import annotations

import subprocess
import sys


from rocmpatch import gitcmd, history
from rocmpatch.errors import ExitCode
from tests.cli_process import run_rocmpatch
from tests.fixtures import make_series, write_lock

PATCHED_A3 = "return 33  # rocm\n"


def test_new_directory_gets_pin_plus_series(cli, project, upstream, tmp_path):
    target = tmp_path / "new" / "Megatron"
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0, result.stderr
    repo = gitcmd.open_repo(target)
    assert gitcmd.tree_of(repo, "HEAD") == project_lock(project).patched_tree
    assert PATCHED_A3 in (target / "pkg/a.py").read_text()
    state = history.read(repo)
    assert state.base == upstream.commit
    assert [a.name for a in state.applied] == ["first-fix", "second-fix"]
    assert (target / ".git/shallow").exists()  # materialized shallowly, not a full clone
    assert gitcmd.dirty_paths(repo) == []
    assert not list(target.parent.glob(".*partial"))


def test_commit_ids_are_reproducible(cli, tmp_path):
    assert cli("apply", "--target", str(tmp_path / "one")).exit_code == 0
    assert cli("apply", "--target", str(tmp_path / "two")).exit_code == 0
    heads = {gitcmd.head_commit(gitcmd.open_repo(tmp_path / name)) for name in ("one", "two")}
    assert len(heads) == 1


def test_later_new_targets_take_the_series_kept_in_the_cache(cli, project, tmp_path):
    """The first new target commits the series into the cache; later ones copy it from there (no
    patch is applied again) and get the same commits."""
    from rocmpatch import series, store

    assert cli("apply", "--target", str(tmp_path / "one")).exit_code == 0
    loaded = series.load(project)
    lock = loaded.locked()
    cache = store.cached_repo(lock.upstream)
    kept = gitcmd.resolve_commit(cache, f"refs/rocmpatch/series/{history.series_key(loaded.patches, lock.upstream.commit)}")
    assert kept == gitcmd.head_commit(gitcmd.open_repo(tmp_path / "one"))
    result = cli("apply", "--target", str(tmp_path / "two"))
    assert result.exit_code == 0, result.stderr
    assert "applied          second-fix" in result.stdout
    two = gitcmd.open_repo(tmp_path / "two")
    assert gitcmd.head_commit(two) == kept
    assert [a.name for a in history.read(two).applied] == ["first-fix", "second-fix"]
    assert gitcmd.dirty_paths(two) == []
    assert cli("verify", "--target", str(tmp_path / "two")).exit_code == 0


def test_unwritable_cache_applies_in_the_target_and_says_so(cli, monkeypatch, tmp_path):
    import os

    from rocmpatch import store

    cache_root = str(store.cache_dir())
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path).startswith(cache_root) and mode & os.W_OK else real_access(path, mode, **kw))
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == 0, result.stderr
    assert "is not writable: the series is applied in the new target instead" in result.stderr
    assert "applied          second-fix" in result.stdout
    assert cli("verify", "--target", str(tmp_path / "t")).exit_code == 0


def test_rerun_is_a_noop(cli, tmp_path):
    target = tmp_path / "t"
    cli("apply", "--target", str(target))
    head = gitcmd.head_commit(gitcmd.open_repo(target))
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0
    assert "nothing to do" in result.stdout
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == head


def test_checkout_at_pin_gets_the_missing_patches(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0, result.stderr
    assert "applied          second-fix" in result.stdout
    assert PATCHED_A3 in (target / "pkg/a.py").read_text()


def test_partially_applied_target_is_completed(cli, project, upstream, tmp_path):
    target = tmp_path / "t"
    only_first = make_series(tmp_path / "first-only", upstream, patches=None)
    # A series with just the first patch, same bytes: apply it, then the full series adds the second.
    (only_first.series_dir / "0002-second-fix.patch").unlink()
    text = (only_first.series_dir / "series.yaml").read_text()
    (only_first.series_dir / "series.yaml").write_text(text[: text.index("- name: second-fix")])
    write_lock(only_first)
    assert cli("apply", "--target", str(target), series_dir=only_first.series_dir).exit_code == 0
    result = cli("apply", "--target", str(target))
    assert result.exit_code == 0, result.stderr
    assert "already applied  first-fix" in result.stdout and "applied          second-fix" in result.stdout


def test_dry_run_changes_nothing(cli, tmp_path):
    target = tmp_path / "t"
    result = cli("apply", "--target", str(target), "--dry-run")
    assert result.exit_code == 0 and "would apply" in result.stdout
    assert not target.exists()


def test_refuses_target_at_another_commit(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)  # HEAD = later
    before = (target / "pkg/a.py").read_bytes()
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert "not the pinned v1.0" in result.stderr
    assert (target / "pkg/a.py").read_bytes() == before


def test_refuses_user_edits_and_keeps_them(cli, tmp_path):
    target = tmp_path / "t"
    cli("apply", "--target", str(target))
    cli("unapply", "--target", str(target))
    (target / "pkg/b.py").write_text("mine\n")
    (target / "notes.txt").write_text("my notes\n")
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert "uncommitted changes" in result.stderr and "pkg/b.py" in result.stderr
    # An edit and a file git does not track (data, checkpoints) are told apart.
    assert "edits (pkg/b.py)" in result.stderr and "files git does not track (notes.txt" in result.stderr
    assert (target / "pkg/b.py").read_text() == "mine\n"
    assert (target / "notes.txt").read_text() == "my notes\n"
    assert PATCHED_A3 not in (target / "pkg/a.py").read_text()


def test_refuses_patch_whose_sha_differs_from_lock(cli, project, tmp_path):
    patch = project.series_dir / "0002-second-fix.patch"
    patch.write_bytes(patch.read_bytes() + b"\n")
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "0002-second-fix.patch" in result.stderr and "rocmpatch lock" in result.stderr
    assert not (tmp_path / "t").exists()


def test_refuses_directory_that_is_not_a_repo(cli, tmp_path):
    target = tmp_path / "plain"
    target.mkdir()
    (target / "file").write_text("x")
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert f"{target}: is a directory but no git checkout" in result.stderr
    assert sorted(p.name for p in target.iterdir()) == ["file"]



def test_refuses_a_directory_inside_a_checkout(cli, tmp_path):
    """Only a checkout's top is a target: a directory below it is refused, naming the top, before
    anything is written, by every command."""
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    before = subprocess.run(["git", "-C", str(target), "status", "--porcelain"], check=True, capture_output=True, text=True).stdout
    for command in ("apply", "unapply", "verify", "status"):
        result = cli(command, "--target", str(target / "pkg"))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (command, result.output)
        assert f"{target / 'pkg'}: is inside the checkout {target}, not its top" in result.stderr, command
    assert subprocess.run(["git", "-C", str(target), "status", "--porcelain"], check=True, capture_output=True, text=True).stdout == before

def test_conflict_leaves_target_as_it_was(cli, project, upstream, tmp_path):
    """The second patch breaks: nothing of the first is applied either (atomic)."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    patch = project.series_dir / "0002-second-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"-    return 5\n", b"-    return 6\n"))
    write_lock_lenient(project)
    result = cli("apply", "--target", str(target))
    assert result.exit_code == ExitCode.PATCH_CONFLICT, result.stderr
    assert "patch second-fix does not apply: pkg/b.py, hunk 1" in result.stderr
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit
    assert gitcmd.dirty_paths(repo) == []


def test_refuses_patch_through_symlink(cli, upstream, tmp_path):
    location = make_series(tmp_path / "linky", upstream, patches=[("ok", {"README.md": "changed\n"})])
    bad = (b"diff --git a/alias/a.py b/alias/a.py\n--- a/alias/a.py\n+++ b/alias/a.py\n@@ -1,2 +1,2 @@\n"
           b" def a0():\n-    return 0\n+    return 1\n")
    (location.series_dir / "0001-ok.patch").write_bytes(bad)
    write_lock_lenient(location)
    result = cli("apply", "--target", str(tmp_path / "t"), series_dir=location.series_dir)
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "through the symlink 'alias'" in result.stderr
    assert not (tmp_path / "t").exists()


def test_upstream_url_environment_override(cli, project, upstream, tmp_path, monkeypatch):
    """The lock's url is unreachable; ROCMPATCH_UPSTREAM_URL names a copy."""
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--mirror", str(upstream.path), str(mirror)], check=True)
    lock = project.lock_path.read_text().replace(upstream.url, "https://unreachable.invalid/x.git")
    project.lock_path.write_text(lock)
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "fresh-cache"))
    monkeypatch.setenv("ROCMPATCH_UPSTREAM_URL", f"file://{mirror}")
    result = cli("apply", "--target", str(tmp_path / "t"))
    assert result.exit_code == 0, result.stderr


def test_sigint_mid_apply_then_apply_completes(project, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    args = ("apply", "--target", str(target), "--series-dir", str(project.series_dir))
    interrupted = run_rocmpatch(*args, env={"ROCMPATCH_TEST_INTERRUPT_AT": "worktree-updated"})
    assert interrupted.returncode == ExitCode.INTERRUPTED, interrupted.stderr
    assert (target / ".git/rocmpatch/journal.json").exists()
    again = run_rocmpatch(*args)
    assert again.returncode == 0, again.stderr
    assert "finished the interrupted 'apply'" in again.stdout
    verified = run_rocmpatch("verify", "--target", str(target), "--series-dir", str(project.series_dir))
    assert verified.returncode == 0, verified.stdout


def test_sigint_mid_apply_then_unapply_restores(project, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    series = ("--series-dir", str(project.series_dir))
    interrupted = run_rocmpatch("apply", "--target", str(target), *series, env={"ROCMPATCH_TEST_INTERRUPT_AT": "journal-written"})
    assert interrupted.returncode == ExitCode.INTERRUPTED
    # Simulate git dying half-way through the checkout: one file already new, the others old.
    (target / "pkg/b.py").write_bytes(gitcmd.TreeReader(gitcmd.open_repo(target), project_lock(project).patched_tree).read("pkg/b.py"))
    restored = run_rocmpatch("unapply", "--target", str(target), *series)
    assert restored.returncode == 0, restored.stderr
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit
    assert gitcmd.dirty_paths(repo) == []


def test_second_apply_waits_then_exits_busy(project, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    (target / ".git/rocmpatch").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)",
         str(target / ".git/rocmpatch/lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_rocmpatch("apply", "--target", str(target), "--series-dir", str(project.series_dir), env={"ROCMPATCH_LOCK_WAIT": "0.3"})
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == ExitCode.BUSY, result.stderr
    assert "in use by another rocmpatch process" in result.stderr
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


def project_lock(location):

    from tests.fixtures import lock_of

    return lock_of(location)


def write_lock_lenient(location):
    """Re-lock a series whose patches may not apply: sha256s only, patched_tree left as it was."""
    from rocmpatch import series as series_module

    loaded = series_module.load(location, require_lock=False)
    old = loaded.lock
    from rocmpatch.schema import Lock

    from rocmpatch.operations import locking

    locking.write(location, Lock(old.upstream, loaded.locked_patches(), old.patched_tree))


def test_apply_on_an_applied_tree_is_one_line(cli, tmp_path):
    """Not one `already applied` line per patch: one line with the count, exit 0."""
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    for extra in ((), ("--dry-run",)):
        result = cli("apply", "--target", str(target), *extra)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == [f"{target}: the whole series is already applied (2 patches of test_v1); nothing to do"]
