"""drift and rebase of the real series against a real Megatron-LM mirror (ROCMPATCH_TEST_UPSTREAM)."""

from __future__ import annotations

import shutil

import pytest

from rocmpatch import gitcmd, series, store
from rocmpatch.operations import drift, rebase
from rocmpatch.schema import SERIES_FILE
from tests.fixtures import location_of

pytestmark = pytest.mark.upstream

PATCHSETS = series.PACKAGE_DIR.parent / "patchsets" / "core_v0.5.0"


@pytest.fixture(scope="module")
def real_series():
    if not (PATCHSETS / SERIES_FILE).is_file():
        pytest.skip("the real series (patchsets/core_v0.5.0/) is not in this checkout")
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


def test_report_and_rebase_agree_and_continue_refuses_the_untouched_stop(upstream_mirror, tmp_path):
    """core_v0.19.0 onto core_v0.18.2: the report's first conflict is where the rebase stops, with the
    same files and kinds; `--continue` with nothing resolved is refused (a file upstream deleted
    carries no marker)."""
    from rocmpatch.errors import InvalidInput
    from rocmpatch.operations import rebase_report

    source = PATCHSETS.parent / "core_v0.19.0"
    if not (source / SERIES_FILE).is_file():
        pytest.skip("patchsets/core_v0.19.0/ is not in this checkout")
    project = tmp_path / "project"
    shutil.copytree(source, project / "patchsets" / source.name)
    shutil.copy(location_of(source).lock_path, project / "upstream.lock")
    loaded = series.load(location_of(project / "patchsets" / source.name))
    pin, items = loaded.locked().upstream.commit, list(loaded.patches)
    repo, commits = store.history_repo(str(upstream_mirror), [pin, "core_v0.18.2"])
    found = rebase_report.report(repo, source.name, pin, commits["core_v0.18.2"], "core_v0.18.2", items)
    assert sum(found.totals.values()) == len(items) and found.totals["conflict"]
    first = next(p for p in found.patches if p.result == rebase_report.CONFLICT)
    stopped = rebase.start(project, source.name, repo, pin, commits["core_v0.18.2"], "core_v0.18.2", items)
    assert isinstance(stopped, rebase.Stopped) and stopped.patch == first.name
    assert [(c.path, c.kind) for c in stopped.conflicts] == [(c.path, c.kind) for c in first.conflicts]
    with pytest.raises(InvalidInput, match="is not resolved"):
        rebase.resume(project, source.name, items)
    rebase.abort(project, source.name)
    assert sorted(p.name for p in project.iterdir()) == ["patchsets", "upstream.lock"]
