from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from tests.upstream_history import make_history, write_project


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift-cli")
    history = make_history(tmp)
    write_project(history, tmp / "project", "https://example.invalid/upstream.git")
    return history


def drift(history, *args):
    url = f"file://{history.repo}"
    return CliRunner(env={"COLUMNS": "250"}).invoke(app, ["drift", "--series-dir", str(history.series_dir), "--upstream-url", url, *args])


def test_json_names_the_breaking_commits_and_exits_1(setup):
    result = drift(setup, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    patches = {p["name"]: p for p in data["patches"]}
    assert data["ok"] is False and data["to_ref"] == "main"
    assert patches["alpha"]["first_bad"]["id"] == setup.commits["m3"]
    assert patches["mod"]["moved_to"] == "new/mod.py"
    assert patches["gamma"]["state"] == "obsolete"
    assert patches["beta"]["state"] == "applies"
    assert data["from_on_ref"] is False and data["base"] == setup.commits["root"]


def test_exit_0_when_every_patch_applies_at_the_tip(setup, tmp_path):
    report = tmp_path / "report.md"
    result = drift(setup, "--ref", setup.commits["m2"], "--markdown", str(report))
    assert result.exit_code == 0, result.output
    assert "every patch applies" in report.read_text()


def test_range_and_table(setup):
    result = drift(setup, "--range", f"v1.0..{setup.commits['m4']}")
    assert result.exit_code == 1
    assert "renamed to new/mod.py" in result.stdout
    assert "Merge branch 'side'" in result.stdout
    assert "is not on " in result.stderr and "(a release branch)" in result.stderr


def test_ref_and_range_together_are_refused(setup):
    result = drift(setup, "--ref", "main", "--range", "v1.0..main")
    assert result.exit_code == 2
    assert "--range" in result.output
