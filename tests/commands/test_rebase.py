from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rocmpatch import gitcmd, patch_header
from rocmpatch.operations import rebase_state
from rocmpatch.cli import app
from rocmpatch.schema import load_series
from tests.fixtures import RELEASE, location_of, lock_of
from tests.test_rebase import resolve_alpha
from tests.upstream_history import make_history, write_project


@pytest.fixture
def history(tmp_path):
    history = make_history(tmp_path)
    write_project(history, tmp_path / "project", "https://example.invalid/upstream.git")
    gitcmd.run(history.project, "init", "-q")
    return history


def invoke(history, *args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["rebase", "--series-dir", str(history.series_dir), "--upstream-url", str(history.repo), *args]
    )


def snapshot(project):
    return {p.relative_to(project): p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_conflict_then_continue_rewrites_the_series_and_the_lock(history):
    before = snapshot(history.project)
    entries = {e.name: e for e in load_series(history.series_dir).entries}
    result = invoke(history, "--onto", "main")
    assert result.exit_code == 4, result.output
    assert "alpha" in result.output and "rocmpatch rebase --continue" in result.output
    assert snapshot(history.project) == before  # nothing written while stopped
    worktree = rebase_state.state_dir(history.project, RELEASE) / "worktree"
    resolve_alpha(worktree)
    result = invoke(history, "--continue")
    assert result.exit_code == 0, result.output
    assert "dropped as obsolete" in result.output
    lock = lock_of(location_of(history.series_dir))
    assert lock.upstream.commit == history.commits["m7"] and lock.upstream.ref == "main"
    assert lock.upstream.url == "https://example.invalid/upstream.git"
    assert [p.name for p in lock.patches] == ["alpha", "mod", "beta"]
    assert [e.name for e in load_series(history.series_dir).entries] == ["alpha", "mod", "beta"]
    assert not (history.series_dir / "0003-gamma.patch").exists()
    mod = (history.series_dir / "0002-mod.patch").read_text()
    assert "b/new/mod.py" in mod
    # series.yaml is the source of a patch's words: its entries are kept, the rewritten header follows them.
    assert list(load_series(history.series_dir).entries) == [entries[name] for name in ("alpha", "mod", "beta")]
    assert mod.startswith(patch_header.render(entries["mod"]))
    assert not rebase_state.in_progress(history.project, [RELEASE])
    # The rewritten series passes the engine's own checks against the new pin.
    runner = CliRunner()
    common = ["--series-dir", str(history.series_dir), "--upstream-url", str(history.repo)]
    assert runner.invoke(app, ["check", *common]).exit_code == 0
    assert runner.invoke(app, ["lock", "--check", *common]).exit_code == 0


def test_abort_changes_nothing(history):
    before = snapshot(history.project)
    assert invoke(history, "--onto", "main").exit_code == 4
    result = invoke(history, "--abort")
    assert result.exit_code == 0, result.output
    assert snapshot(history.project) == before
    assert not rebase_state.state_dir(history.project, RELEASE).exists()


def test_exactly_one_action(history):
    assert invoke(history).exit_code == 2
    assert invoke(history, "--onto", "main", "--abort").exit_code == 2


def test_continue_refuses_an_unresolved_conflict_in_one_line(history):
    assert invoke(history, "--onto", "main").exit_code == 4
    worktree = rebase_state.state_dir(history.project, RELEASE) / "worktree"
    result = invoke(history, "--continue")
    assert result.exit_code == 3, result.output
    error = [line for line in result.stderr.splitlines() if line.startswith("rocmpatch: error:")]
    assert len(error) == 1 and f"{worktree}: patch alpha is not resolved: a.py:" in error[0]
    assert "git rm FILE" in result.stderr
    resolve_alpha(worktree)
    assert invoke(history, "--continue").exit_code == 0


def test_report_tries_every_patch_and_writes_nothing(history):
    before = snapshot(history.project)
    result = invoke(history, "--onto", "main", "--report")
    assert result.exit_code == 0, result.output  # conflicts are the report's answer, not a failure
    assert "4 patches: 1 exact, 2 3-way, 1 conflict" in result.stdout
    assert "a.py (both changed)" in result.stdout and "upstream has it" in result.stdout
    assert snapshot(history.project) == before
    assert not rebase_state.state_dir(history.project, RELEASE).exists()


def test_report_json(history):
    result = invoke(history, "--onto", "main", "--report", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["release"] == RELEASE and data["onto_ref"] == "main" and data["onto"] == history.commits["m7"]
    assert data["totals"] == {"exact": 1, "3-way": 2, "conflict": 1}
    assert [(p["name"], p["result"], p["upstream_has_it"]) for p in data["patches"]] == [
        ("alpha", "conflict", False), ("mod", "3-way", False), ("gamma", "3-way", True), ("beta", "exact", False)]
    assert data["patches"][0]["conflicts"] == [{"path": "a.py", "kind": "both changed"}]


def test_report_runs_beside_a_stopped_rebase(history):
    assert invoke(history, "--onto", "main").exit_code == 4
    state = (rebase_state.state_dir(history.project, RELEASE) / "state.json").read_bytes()
    assert invoke(history, "--onto", "main", "--report").exit_code == 0
    assert (rebase_state.state_dir(history.project, RELEASE) / "state.json").read_bytes() == state


@pytest.mark.parametrize("args", [["--report"], ["--continue", "--report"], ["--onto", "main", "--report", "--into", "test_v2"],
                                  ["--onto", "main", "--json"]])
def test_report_and_json_only_go_with_onto(history, args):
    assert invoke(history, *args).exit_code == 2
