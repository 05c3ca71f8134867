"""The upstream-drift workflow runs the same commands these tests run against a throwaway upstream."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from rocmpatch.cli import app
from tests.upstream_history import make_history, write_project

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "upstream-drift.yml"


def steps():
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    return data["jobs"]["drift"]["steps"]


def rocmpatch_commands():
    return [shlex.split(s["run"]) for s in steps() if s.get("run", "").startswith("rocmpatch ")]


def test_workflow_commands_against_a_throwaway_upstream(tmp_path, monkeypatch):
    history = make_history(tmp_path)
    write_project(history, tmp_path / "project", "https://example.invalid/upstream.git")
    monkeypatch.setenv("ROCMPATCH_UPSTREAM_URL", f"file://{history.repo}")
    monkeypatch.setenv("ROCMPATCH_SERIES_DIR", str(history.series_dir.parent))
    monkeypatch.setenv("ROCMPATCH_RELEASE", history.series_dir.name)  # what the matrix sets
    monkeypatch.chdir(tmp_path)
    commands = rocmpatch_commands()
    assert [c[:2] for c in commands] == [["rocmpatch", "lock"], ["rocmpatch", "check"], ["rocmpatch", "drift"]]
    codes = [CliRunner().invoke(app, command[1:]).exit_code for command in commands]
    # The lock and the series are fine at the pin; upstream main breaks patches: the job fails.
    assert codes == [0, 0, 1]
    report = (tmp_path / "report.md").read_text()
    assert history.commits["m3"][:12] in report and "renamed to new/mod.py" in report

    # The publishing step appends the report to the job summary, also after a failed step.
    publish = next(s for s in steps() if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert publish.get("if") == "always()"
    summary = tmp_path / "summary.md"
    subprocess.run(["bash", "-c", publish["run"]], check=True, cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary), "PATH": "/usr/bin:/bin"})
    assert summary.read_text() == report


def test_the_matrix_has_one_job_per_release_folder(tmp_path):
    """The matrix is what the listing step prints: run it (rocmpatch of this Python's environment)."""
    data = yaml.safe_load(WORKFLOW.read_text())
    job = data["jobs"]["drift"]
    assert job["env"]["ROCMPATCH_RELEASE"] == "${{ matrix.release }}"
    assert job["needs"] == "releases"
    assert job["strategy"]["matrix"]["release"] == "${{ fromJSON(needs.releases.outputs.names) }}"
    listing = data["jobs"]["releases"]
    assert listing["outputs"]["names"] == "${{ steps.list.outputs.names }}"
    step = next(s for s in listing["steps"] if s.get("id") == "list")
    output = tmp_path / "github_output"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMPATCH_")}
    env.update(GITHUB_OUTPUT=str(output), PATH=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    subprocess.run(["bash", "-e", "-c", step["run"]], check=True, cwd=tmp_path, env=env, timeout=120)
    name, _, value = output.read_text().strip().partition("=")
    folders = sorted(p.parent.name for p in (WORKFLOW.parents[2] / "patchsets").glob("*/series.yaml"))
    assert name == "names" and sorted(json.loads(value)) == folders
