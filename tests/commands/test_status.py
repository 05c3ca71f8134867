from __future__ import annotations

import json
import subprocess


def test_states_of_each_patch(cli, project, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    report = json.loads(cli("status", "--target", str(target), "--json").stdout)
    assert [p["state"] for p in report["patches"]] == ["not-applied", "not-applied"]
    assert report["at_pin"] is True and report["uncommitted"] == []
    assert report["patches"][0]["files"] == ["pkg/a.py", "pkg/new.py"]

    assert cli("apply", "--target", str(target)).exit_code == 0
    result = cli("status", "--target", str(target))
    assert result.exit_code == 0
    assert "first-fix" in result.stdout and "applied" in result.stdout
    report = json.loads(cli("status", "--target", str(target), "--json").stdout)
    assert [p["state"] for p in report["patches"]] == ["applied", "applied"]


def test_conflicting_patch(cli, upstream, tmp_path):
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    (target / "pkg/b.py").write_text("rewritten\n")
    subprocess.run(["git", "-C", str(target), "-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qam", "mine"], check=True)
    result = cli("status", "--target", str(target), "--json")
    assert result.exit_code == 0  # the user's commit on the pin: still a checkout of the release
    report = json.loads(result.stdout)
    states = {p["name"]: (p["state"], p["reason"]) for p in report["patches"]}
    assert states["first-fix"] == ("not-applied", None)
    assert states["second-fix"][0] == "conflicting" and "pkg/b.py" in states["second-fix"][1]
    assert report["at_pin"] is False


def test_a_repository_of_no_release_exits_5(cli, upstream, tmp_path):
    """Not based on the pin (another commit of the upstream, here the one before it): one line, exit 5,
    instead of a table where every patch is 'conflicting'."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", f"{upstream.ref}~1"], check=True)
    result = cli("status", "--target", str(target))
    assert result.exit_code == 5 and result.stdout == ""
    assert "is no checkout of release" in result.stderr.splitlines()[0]
    as_json = cli("status", "--target", str(target), "--json")
    assert as_json.exit_code == 5 and json.loads(as_json.stdout)["at_pin"] is False
