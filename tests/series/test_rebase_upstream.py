"""rebase --report and rebase of every release's real series onto main of a real Megatron-LM mirror
(ROCMPATCH_TEST_UPSTREAM): the report's first conflict is where the rebase stops, with the same
files and kinds, and `--continue` with nothing resolved is refused (a file upstream deleted carries
no marker); a series the report finds no conflict in is rebased through."""

from __future__ import annotations

import shutil

import pytest

from rocmpatch import series, store
from rocmpatch.errors import InvalidInput
from rocmpatch.operations import rebase, rebase_report
from tests.fixtures import location_of
from testkit import harness

pytestmark = [harness.releases_with(), pytest.mark.upstream]

ONTO = "main"


def test_report_and_rebase_agree_and_continue_refuses_the_untouched_stop(release, upstream_mirror, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(release.series_dir, project / "patchsets" / release.name)
    shutil.copy(release.location.lock_path, project / "upstream.lock")
    loaded = series.load(location_of(project / "patchsets" / release.name))
    pin, items = loaded.locked().upstream.commit, list(loaded.patches)
    repo, commits = store.history_repo(str(upstream_mirror), [pin, ONTO])
    found = rebase_report.report(repo, release.name, pin, commits[ONTO], ONTO, items)
    assert sum(found.totals.values()) == len(items)
    result = rebase.start(project, release.name, repo, pin, commits[ONTO], ONTO, items)
    if not found.totals["conflict"]:
        assert not isinstance(result, rebase.Stopped) and len(result.outcomes) == len(items)
        return
    first = next(p for p in found.patches if p.result == rebase_report.CONFLICT)
    assert isinstance(result, rebase.Stopped) and result.patch == first.name
    assert [(c.path, c.kind) for c in result.conflicts] == [(c.path, c.kind) for c in first.conflicts]
    with pytest.raises(InvalidInput, match="is not resolved"):
        rebase.resume(project, release.name, items)
    rebase.abort(project, release.name)
    assert sorted(p.name for p in project.iterdir()) == ["patchsets", "upstream.lock"]
