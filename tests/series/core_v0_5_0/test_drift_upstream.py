"""drift and rebase of core_v0.5.0's series against a real Megatron-LM mirror (ROCMPATCH_TEST_UPSTREAM):
to main (thousands of commits later) and onto the next tag. (Every release's rebase --report onto
main: tests/series/test_rebase_upstream.py.)"""

from __future__ import annotations

import shutil

import pytest

from rocmpatch import gitcmd, series, store
from rocmpatch.operations import drift, rebase
from tests.fixtures import location_of
from testkit.harness import release_of

pytestmark = pytest.mark.upstream

PATCHSETS = release_of(__file__).series_dir


@pytest.fixture(scope="module")
def real_series():
    return series.load(location_of(PATCHSETS))


def test_drift_to_main_names_a_commit_on_main_for_every_break(real_series, upstream_mirror):
    repo, commits = store.history_repo(str(upstream_mirror), [real_series.locked().upstream.commit, "main"])
    report = drift.run_drift(repo, [p.patch for p in real_series.patches], real_series.locked().upstream.commit, "main")
    main_line = set(gitcmd.first_parent_line(repo, report.base, "main"))
    assert report.commits > 4000 and report.candidates < report.commits
    for item in report.patches:
        assert item.at_from == drift.APPLIES, item
        if not item.ok:
            assert item.first_bad.id in main_line and item.first_bad.subject
            assert item.moved_to or item.deleted or item.reason or item.state == drift.OBSOLETE


def test_rebase_onto_core_v0_6_0_finishes_or_stops_and_aborts_cleanly(real_series, upstream_mirror, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(PATCHSETS, project / "patchsets" / PATCHSETS.name)
    shutil.copy(real_series.location.lock_path, project / "upstream.lock")
    loaded = series.load(location_of(project / "patchsets" / PATCHSETS.name))
    items = list(loaded.patches)
    repo, commits = store.history_repo(str(upstream_mirror), [loaded.locked().upstream.commit, "core_v0.6.0"])
    result = rebase.start(project, loaded.location.release, repo, loaded.locked().upstream.commit, commits["core_v0.6.0"], "core_v0.6.0", items)
    outcomes = [o.result for o in result.outcomes]
    if isinstance(result, rebase.Stopped):
        assert outcomes[-1] == rebase.CONFLICT and result.files
        assert "<<<<<<< upstream" in (result.worktree / result.files[0]).read_text()
        rebase.abort(project, loaded.location.release)
        assert sorted(p.name for p in project.iterdir()) == ["patchsets", "upstream.lock"]
    else:
        assert len(outcomes) == len(items)
