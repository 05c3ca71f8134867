from __future__ import annotations

import pytest

from rocmpatch import series
from rocmpatch.errors import InvalidInput


def test_series_dir_puts_the_lock_beside_patchsets(tmp_path):
    patchsets, release = series.find_patchsets(tmp_path / "proj" / "patchsets")
    assert patchsets.lock_path == tmp_path / "proj" / "upstream.lock" and release is None


def test_a_release_folder_as_series_dir_names_the_release(project):
    patchsets, release = series.find_patchsets(project.series_dir)
    assert release == "test_v1" and patchsets.location(release) == project
    assert patchsets.releases() == ["test_v1"]


def test_default_is_the_source_tree_or_the_bundled_copy():
    default = series.default_patchsets_dir()
    assert default in (series.PACKAGE_DIR.parent / "patchsets", series.BUNDLED_DIR / "patchsets")


def test_load_reads_bytes_and_checks_sha(project):
    loaded = series.load(project)
    assert [p.name for p in loaded.patches] == ["first-fix", "second-fix"]
    assert loaded.lock_problems() == []
    patch = project.series_dir / "0001-first-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n", 1))  # a \r must count
    with pytest.raises(InvalidInput, match="0001-first-fix.patch: sha256 .* differs") as raised:
        series.load(project).locked()
    assert "rocmpatch lock" in str(raised.value)


def test_missing_patch_file(project):
    (project.series_dir / "0002-second-fix.patch").unlink()
    with pytest.raises(InvalidInput, match="0002-second-fix.patch: patch file of 'second-fix' not found"):
        series.load(project)


def test_lock_and_series_disagree_on_names(project):
    text = project.lock_path.read_text().replace("name: second-fix", "name: renamed")
    project.lock_path.write_text(text)
    problems = series.load(project).lock_problems()
    assert any("'second-fix' is in series.yaml but not in" in p for p in problems)
    assert any("'renamed' is not in series.yaml" in p for p in problems)


def test_malformed_yaml_names_file_and_line(project):
    (project.series_dir / "series.yaml").write_text("series:\n  - name: [unclosed\n")
    with pytest.raises(InvalidInput, match=r"series.yaml:\d+: invalid YAML"):
        series.load(project)


def test_unparsable_patch(project):
    (project.series_dir / "0001-first-fix.patch").write_bytes(b"this is not a diff\n")
    with pytest.raises(InvalidInput, match="0001-first-fix.patch: contains no file changes"):
        series.load(project)


@pytest.mark.parametrize("path", ["../outside.py", ".git/config", "/etc/passwd", "pkg/../../x"])
def test_patch_paths_outside_the_tree_are_refused(project, path):
    text = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"
    (project.series_dir / "0001-first-fix.patch").write_text(text)
    with pytest.raises(InvalidInput, match="unsafe path|lacks the a/ or b/ prefix"):
        series.load(project)
