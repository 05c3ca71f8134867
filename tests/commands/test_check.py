from __future__ import annotations

import json

from rocmpatch.errors import ExitCode
from tests.commands.test_apply import write_lock_lenient


def test_series_applies(cli):
    result = cli("check", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True and list(document["releases"]) == ["test_v1"]
    report = document["releases"]["test_v1"]
    assert [p["name"] for p in report["patches"]] == ["first-fix", "second-fix"]
    assert report["patched_tree"]["actual"] == report["patched_tree"]["expected"]


def test_every_broken_patch_reported(cli, project):
    patch = project.series_dir / "0001-first-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"-    return 3\n", b"-    return 4\n"))
    write_lock_lenient(project)
    result = cli("check", "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    report = json.loads(result.stdout)["releases"]["test_v1"]
    first, second = report["patches"]
    assert first["ok"] is False and "pkg/a.py, hunk 1" in first["error"]
    assert second["ok"] is True  # checked on the tree without the broken one: every patch is reported
    text = cli("check")
    assert "FAIL first-fix" in text.stdout


def test_stale_lock_fails_check(cli, project):
    lock = project.lock_path.read_text()
    patched = lock.split("patched_tree: ")[1].strip()
    project.lock_path.write_text(lock.replace(patched, "0" * 40))
    result = cli("check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "!= upstream.lock patched_tree" in result.stdout
