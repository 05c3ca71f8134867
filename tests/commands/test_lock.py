from __future__ import annotations

from rocmpatch.errors import ExitCode
from tests.fixtures import lock_of


def test_check_passes_on_fresh_lock(cli):
    result = cli("lock", "--check")
    assert result.exit_code == 0 and "up to date" in result.stdout


def test_check_fails_on_stale_lock_then_lock_fixes_it(cli, project):
    patch = project.series_dir / "0002-second-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"test patch", b"reworded"))
    before = project.lock_path.read_text()
    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "patch second-fix" in result.stdout
    assert project.lock_path.read_text() == before  # --check changes nothing
    assert cli("lock").exit_code == 0
    assert cli("lock", "--check").exit_code == 0


def test_new_lock_needs_a_pin(cli, project, upstream):
    project.lock_path.unlink()
    result = cli("lock")
    assert result.exit_code == ExitCode.INVALID_INPUT and "--commit" in result.stderr
    result = cli("lock", "--url", upstream.url, "--ref", upstream.ref, "--commit", upstream.ref)
    assert result.exit_code == ExitCode.INVALID_INPUT and "40-hex" in result.stderr
    result = cli("lock", "--url", upstream.url, "--ref", upstream.ref, "--commit", upstream.commit)
    assert result.exit_code == 0, result.stderr
    assert lock_of(project).upstream.tree == upstream.tree
