from __future__ import annotations

import hashlib

from rocmpatch import patch_header
from rocmpatch.errors import ExitCode
from tests.fixtures import lock_of, make_overlay

FIRST = "0001-first-fix.patch"


def snapshot(*roots):
    """Every file under `roots`, with its bytes."""
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def edit_entry(series_yaml, old: str, new: str) -> None:
    text = series_yaml.read_text()
    assert old in text, old
    series_yaml.write_text(text.replace(old, new, 1))


def test_check_passes_on_fresh_lock(cli):
    result = cli("lock", "--check")
    assert result.exit_code == 0 and "up to date" in result.stdout


def test_check_fails_on_stale_lock_then_lock_fixes_it(cli, project):
    patch = project.series_dir / "0002-second-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"\n---\n", b"\n---\nA note above the diff.\n", 1))
    before = project.lock_path.read_text()
    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "patch second-fix" in result.stdout
    assert project.lock_path.read_text() == before  # --check changes nothing
    assert cli("lock").exit_code == 0
    assert cli("lock", "--check").exit_code == 0


def test_lock_writes_each_header_from_series_yaml_and_keeps_the_diff(cli, project):
    series_yaml = project.series_dir / "series.yaml"
    edit_entry(series_yaml, "summary: test patch", "summary: the first fix, reworded in series.yaml")
    patch = project.series_dir / FIRST
    old_text = patch.read_text()
    before = snapshot(project.series_dir.parent.parent)

    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    line = next(line for line in result.stdout.splitlines() if FIRST in line)
    assert line.startswith(f"{patch}:4: the header's summary differs from series[0].summary in series.yaml")
    assert "rocmpatch lock --release test_v1" in line
    assert snapshot(project.series_dir.parent.parent) == before  # --check changes nothing

    result = cli("lock")
    assert result.exit_code == 0, result.output
    assert f"wrote the header of 1 patch file(s)" in result.stdout
    new_text = patch.read_text()
    assert "Subject: [PATCH] first-fix: the first fix, reworded in series.yaml\n" in new_text
    assert patch_header.split(new_text)[1] == patch_header.split(old_text)[1]  # the diff, byte for byte
    assert old_text.endswith(patch_header.split(old_text)[1]) and new_text.endswith(patch_header.split(old_text)[1])
    locked = {p.name: p.sha256 for p in lock_of(project).patches}
    assert locked["first-fix"] == hashlib.sha256(patch.read_bytes()).hexdigest()
    assert cli("lock", "--check").exit_code == 0
    assert cli("check").exit_code == 0  # the series still applies exactly and gives the locked tree


def test_a_header_edited_by_hand_is_reported_then_written_back(cli, project):
    patch = project.series_dir / FIRST
    original = patch.read_bytes()
    patch.write_bytes(original.replace(b"What first-fix changes.", b"What the header says instead."))
    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert f"{patch}:6: the header's description differs from series[0].description in series.yaml" in result.stdout
    assert cli("lock").exit_code == 0
    assert patch.read_bytes() == original


def test_an_entry_that_cannot_be_a_header_changes_nothing(cli, project):
    # single-quoted YAML: a blank line is a line break
    edit_entry(project.series_dir / "series.yaml", "What second-fix changes.", "What second-fix changes.\n\n    ---\n\n    more")
    before = snapshot(project.series_dir.parent.parent)
    result = cli("lock")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "series.yaml: series[1].description: line 2 starts with '---'" in result.stderr
    assert snapshot(project.series_dir.parent.parent) == before


def test_lock_overlay_writes_the_overlay_headers_only(cli, project, upstream, tmp_path):
    overlay = make_overlay(tmp_path / "framework" / "rocm-overlay", upstream, project)
    edit_entry(overlay / "series.yaml", "summary: test patch", "summary: the framework's words")
    release_files = snapshot(project.series_dir.parent.parent)
    result = cli("lock", "--check", "--overlay", str(overlay))
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert f"{overlay / '0001-framework-fix.patch'}:4: the header's summary differs from series[0].summary" in result.stdout
    assert f"rocmpatch lock --overlay {overlay}" in result.stdout
    result = cli("lock", "--overlay", str(overlay))
    assert result.exit_code == 0, result.output
    assert "first-fix: the framework's words" not in (overlay / "0001-framework-fix.patch").read_text()
    assert "framework-fix: the framework's words" in (overlay / "0001-framework-fix.patch").read_text()
    assert snapshot(project.series_dir.parent.parent) == release_files  # the release's files are rocmpatch's
    assert cli("lock", "--check", "--overlay", str(overlay)).exit_code == 0


def test_lock_writes_the_release_docs_page_and_check_reports_it_stale(cli, project):
    docs = project.series_dir.parent.parent / "docs"
    docs.mkdir()
    page = docs / "patches-test_v1.md"
    page.write_text("# The test_v1 series\n\nHand-written prose.\n")
    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert f"{page}:4: is not what {project.series_dir / 'series.yaml'} gives" in result.stdout
    assert cli("lock").exit_code == 0
    text = page.read_text()
    assert text.startswith("# The test_v1 series\n\nHand-written prose.\n\n<!-- patch first-fix:")
    assert "### 0002 second-fix\n\nTest patch.\n" not in text and "### 0002 second-fix\n\ntest patch.\n" in text
    assert cli("lock", "--check").exit_code == 0
    edit_entry(project.series_dir / "series.yaml", "What second-fix changes.", "What second-fix changes now.")
    result = cli("lock", "--check")
    assert result.exit_code == ExitCode.CHECK_FAILED and f"{page}:" in result.stdout


def test_new_lock_needs_a_pin(cli, project, upstream):
    project.lock_path.unlink()
    result = cli("lock")
    assert result.exit_code == ExitCode.INVALID_INPUT and "--commit" in result.stderr
    result = cli("lock", "--url", upstream.url, "--ref", upstream.ref, "--commit", upstream.ref)
    assert result.exit_code == ExitCode.INVALID_INPUT and "40-hex" in result.stderr
    result = cli("lock", "--url", upstream.url, "--ref", upstream.ref, "--commit", upstream.commit)
    assert result.exit_code == 0, result.stderr
    assert lock_of(project).upstream.tree == upstream.tree
