from __future__ import annotations

import pytest

from rocmpatch.errors import InvalidInput
from rocmpatch.schema import load_lock_file, load_series


def test_ref_where_commit_belongs(project):
    text = project.lock_path.read_text()
    commit = text.split("commit: ")[1].split()[0]
    project.lock_path.write_text(text.replace(commit, "v1.0"))  # a tag where the commit id belongs
    with pytest.raises(InvalidInput, match=r"upstream.lock:\d+: releases.test_v1.upstream.commit: expected a full 40-hex commit id"):
        load_lock_file(project.lock_path)


@pytest.mark.parametrize("added, error", [
    ("  colour: blue", r"series.yaml:\d+: series\[0\].colour: unknown key"),
    ("  origin: elsewhere", r"series.yaml:\d+: duplicate key 'origin'"),  # the last would win silently
])
def test_bad_key_in_series_entry(project, added, error):
    path = project.series_dir / "series.yaml"
    path.write_text(path.read_text().replace("  origin: rocmpatch", f"  origin: rocmpatch\n{added}", 1))
    with pytest.raises(InvalidInput, match=error):
        load_series(project.series_dir)


def test_malformed_lock_yaml(project):
    project.lock_path.write_text("version: 2\nreleases: {url: [\n")
    with pytest.raises(InvalidInput, match=r"upstream.lock:\d+: invalid YAML"):
        load_lock_file(project.lock_path)


def test_single_release_lock_names_the_fix(project):
    project.lock_path.write_text("version: 1\nupstream: {}\npatches: []\npatched_tree: x\n")
    with pytest.raises(InvalidInput, match=r"upstream.lock:1: version: is the single-release lock") as raised:
        load_lock_file(project.lock_path)
    assert "patchsets/<release>/" in raised.value.hint
