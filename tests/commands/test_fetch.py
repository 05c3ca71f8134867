from __future__ import annotations

import shutil
import subprocess

from rocmpatch import store
from rocmpatch.errors import ExitCode


def test_fetch_fills_cache_then_works_offline(cli, project, upstream, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", "--mirror", str(upstream.path), str(mirror)], check=True)
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("fetch", "--upstream-url", str(mirror))
    assert result.exit_code == 0, result.stderr
    assert store.commit_path(upstream.commit).is_dir()
    shutil.rmtree(mirror)  # a warm cache makes no network (or any) fetch
    again = cli("fetch", "--upstream-url", str(mirror))
    assert again.exit_code == 0, again.stderr


def test_refuses_ext_and_dash_urls(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "cache"))
    for url in ("ext::sh -c touch% /tmp/pwned", "-oProxyCommand=touch /tmp/pwned", "--upload-pack=touch /tmp/x"):
        result = cli("fetch", f"--upstream-url={url}")
        assert result.exit_code == ExitCode.UPSTREAM_ERROR, (url, result.stderr)
        assert "refusing URL" in result.stderr
    assert not (tmp_path / "cache" / "commits").exists()


def test_commit_missing_upstream(cli, project, tmp_path, monkeypatch):
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "cache"))
    result = cli("fetch", "--upstream-url", str(other))
    assert result.exit_code == ExitCode.UPSTREAM_ERROR
    lock = __import__("tests.fixtures", fromlist=["lock_of"]).lock_of(project)
    # In words, not git's "upload-pack: not our ref <sha>"
    error = next(line for line in result.stderr.splitlines() if line.startswith("rocmpatch: error:"))
    assert f"the mirror {other} has no commit {lock.upstream.commit[:8]} ({lock.upstream.ref}): is it a full mirror" in error
    assert "not our ref" not in result.stderr
    commits = tmp_path / "cache" / "commits"
    assert not list(commits.glob("*.partial"))  # the half-built entry was removed
    assert not store.commit_path(load_commit(project)).exists()


def load_commit(project) -> str:

    from tests.fixtures import lock_of

    return lock_of(project).upstream.commit


def test_a_wrong_upstream_url_with_a_warm_cache_is_a_warning(cli, project, upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMPATCH_CACHE_DIR", str(tmp_path / "cache"))
    assert cli("fetch", "--upstream-url", str(upstream.path)).exit_code == 0
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    for wrong, says in ((tmp_path / "nowhere", "does not exist"), (other, "has no commit")):
        result = cli("fetch", "--upstream-url", str(wrong))
        assert result.exit_code == 0, result.stderr  # the cache holds the pin: nothing to fetch
        warning = next(line for line in result.stderr.splitlines() if "warning" in line)
        assert says in warning and "not used: the cache already holds" in warning
    assert "warning" not in cli("fetch", "--upstream-url", str(upstream.path)).stderr
