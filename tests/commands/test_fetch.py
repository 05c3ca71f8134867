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
    assert "could not fetch" in result.stderr
    commits = tmp_path / "cache" / "commits"
    assert not list(commits.glob("*.partial"))  # the half-built entry was removed
    assert not store.commit_path(load_commit(project)).exists()


def load_commit(project) -> str:

    from tests.fixtures import lock_of

    return lock_of(project).upstream.commit
