from __future__ import annotations

import subprocess

from rocmpatch import gitcmd
from rocmpatch.errors import ExitCode


def test_back_to_pristine_pin(cli, upstream, tmp_path):
    target = tmp_path / "t"
    cli("apply", "--target", str(target))
    result = cli("unapply", "--target", str(target))
    assert result.exit_code == 0, result.stderr
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit
    assert gitcmd.dirty_paths(repo) == []
    assert not (target / "pkg/new.py").exists()
    assert "removed  second-fix" in result.stdout


def test_refuses_user_edits(cli, tmp_path):
    target = tmp_path / "t"
    cli("apply", "--target", str(target))
    (target / "pkg/a.py").write_text("mine\n")
    result = cli("unapply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert "--force" in result.stderr
    assert (target / "pkg/a.py").read_text() == "mine\n"


def test_force_saves_edits_as_a_patch(cli, upstream, tmp_path):
    target = tmp_path / "t"
    cli("apply", "--target", str(target))
    (target / "pkg/a.py").write_text("mine\n")
    (target / "notes.txt").write_text("my notes\n")
    result = cli("unapply", "--target", str(target), "--force")
    assert result.exit_code == 0, result.stderr
    saved = next((target / ".git/rocmpatch").glob("saved-edits-*.patch"))
    said = result.stderr.splitlines() + result.stdout.splitlines()
    assert [line for line in said if str(saved) in line] == [  # each said once: where (stderr), how to restore (stdout)
        f"saved your uncommitted edits to {saved}",
        f"to bring them back on the patched tree: rocmpatch apply --target {target} && git -C {target} apply {saved}"], said
    repo = gitcmd.open_repo(target)
    assert gitcmd.head_commit(repo) == upstream.commit and gitcmd.dirty_paths(repo) == []
    # The saved patch brings the edits back on top of the patched tree.
    assert cli("apply", "--target", str(target)).exit_code == 0
    subprocess.run(["git", "-C", str(target), "apply", str(saved)], check=True)
    assert (target / "pkg/a.py").read_text() == "mine\n"
    assert (target / "notes.txt").read_text() == "my notes\n"


def test_unapply_of_pristine_target_is_a_noop(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    result = cli("unapply", "--target", str(target))
    assert result.exit_code == 0 and "nothing was applied" in result.stdout


def test_refuses_target_at_another_commit(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    result = cli("unapply", "--target", str(target))
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.later
