from __future__ import annotations

import subprocess
import sys

import pytest

from rocmpatch import files, store
from rocmpatch.errors import Busy, UpstreamError
from rocmpatch.schema import Upstream


def pin(upstream, tree=None) -> Upstream:
    return Upstream(upstream.url, upstream.ref, upstream.commit, tree or upstream.tree)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("ROCMPATCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store.cache_dir() == tmp_path / "rocmpatch"


def test_shallow_single_commit(upstream):
    repo = store.cached_repo(pin(upstream))
    assert (store.commit_path(upstream.commit) / "shallow").exists()
    count = subprocess.run(["git", "--git-dir", repo.git_dir, "rev-list", "--all", "--count"], capture_output=True, text=True).stdout.strip()
    assert count == "1"


def test_tree_mismatch_is_refused_and_not_cached(upstream):
    with pytest.raises(UpstreamError, match="upstream.lock says"):
        store.cached_repo(pin(upstream, tree="0" * 40))
    assert not store.commit_path(upstream.commit).exists()
    assert not list(store.commit_path(upstream.commit).parent.glob("*.partial"))


def test_override_order(upstream, monkeypatch, tmp_path):
    locked = pin(upstream)
    assert store.upstream_url(locked) == str(upstream.path)  # a local file:// URL becomes its absolute path
    monkeypatch.setenv("ROCMPATCH_UPSTREAM_URL", str(tmp_path))
    assert store.upstream_url(locked) == str(tmp_path)
    assert store.upstream_url(locked, "https://mirror.example/m.git") == "https://mirror.example/m.git"
    with pytest.raises(UpstreamError, match="does not exist"):
        store.upstream_url(locked, str(tmp_path / "missing"))


def test_file_lock_busy(tmp_path):
    path = tmp_path / "lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); print(1, flush=True); time.sleep(30)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        with pytest.raises(Busy):
            with files.file_lock(path, wait=0.2, what="x"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with files.file_lock(path, wait=0.2, what="x"):
        pass


class CountingSeries:
    """A stand-in for committing a series: returns the pin and counts how often it was asked."""

    def __init__(self, upstream) -> None:
        self.upstream, self.made = upstream, 0

    def __call__(self, repo) -> str:
        self.made += 1
        return self.upstream.commit


def test_series_head_is_made_once_then_kept(upstream):
    cache, compute = store.cached_repo(pin(upstream)), CountingSeries(upstream)
    assert store.series_head(cache, "k1", upstream.tree, compute) == upstream.commit
    assert store.series_head(cache, "k1", upstream.tree, compute) == upstream.commit
    assert compute.made == 1
    assert store.series_head(cache, "k2", upstream.tree, compute) == upstream.commit  # another series
    assert compute.made == 2


def test_kept_series_head_with_another_tree_is_made_again(upstream):
    cache, compute = store.cached_repo(pin(upstream)), CountingSeries(upstream)
    store.series_head(cache, "k", upstream.tree, compute)
    store.series_head(cache, "k", "0" * 40, compute)  # e.g. a cache entry edited by hand
    assert compute.made == 2
