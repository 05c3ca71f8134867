"""The engine on every real release: apply, verify, status and the refusals on the real Megatron-LM
tree (needs ROCMPATCH_TEST_UPSTREAM; skips without it). Release-agnostic: one run per folder in
patchsets/; what each series does to the tree is tested in tests/series/<release>/."""

from __future__ import annotations

import pytest

from rocmpatch import gitcmd, series
from rocmpatch.errors import ExitCode

pytestmark = pytest.mark.upstream


PATCHSETS = series.find_patchsets(series.PACKAGE_DIR.parent / "patchsets")[0]


@pytest.fixture(scope="module", params=PATCHSETS.releases())
def real_series(request) -> series.Location:
    location = PATCHSETS.location(request.param)
    if not location.lock_path.is_file():
        pytest.skip("upstream.lock is not in this checkout")
    return location


@pytest.fixture(scope="module")
def patched(real_series, upstream_mirror, tmp_path_factory):
    """One patched tree for the module (applying it is the slow part)."""
    from click.testing import CliRunner

    from rocmpatch.cli import app

    target = tmp_path_factory.mktemp("fulltree") / "Megatron-LM"
    result = CliRunner().invoke(app, ["apply", "--target", str(target), "--upstream-url", str(upstream_mirror), "--series-dir", str(real_series.series_dir)])
    assert result.exit_code == 0, result.stderr
    return target


def invoke(real_series, *args):
    from click.testing import CliRunner

    from rocmpatch.cli import app

    return CliRunner().invoke(app, [*args, "--series-dir", str(real_series.series_dir)])


def test_apply_is_shallow_and_verifies(patched, real_series):
    git_bytes = sum(p.stat().st_size for p in (patched / ".git").rglob("*") if p.is_file())
    assert git_bytes < 30 * 2**20, f"{git_bytes} bytes of git data: not a shallow checkout"
    assert invoke(real_series, "verify", "--target", str(patched)).exit_code == 0


def test_edit_of_each_kind_fails_verify_then_apply_refuses(patched, real_series):
    touched = sorted({p for loaded in series.load(real_series).patches for p in loaded.patch.paths})
    edited = next(p for p in touched if (patched / p).is_file())
    original = (patched / edited).read_bytes()
    (patched / edited).write_bytes(original + b"# local edit\n")
    try:
        result = invoke(real_series, "verify", "--target", str(patched))
        assert result.exit_code == ExitCode.CHECK_FAILED
        assert f"edited         {edited}" in result.stdout
        refused = invoke(real_series, "apply", "--target", str(patched))
        assert refused.exit_code == ExitCode.TARGET_REFUSED
        assert (patched / edited).read_bytes() == original + b"# local edit\n"
    finally:
        (patched / edited).write_bytes(original)
    assert invoke(real_series, "verify", "--target", str(patched)).exit_code == 0


def test_status_shows_everything_applied(patched, real_series):
    import json

    report = json.loads(invoke(real_series, "status", "--target", str(patched), "--json").stdout)
    assert {p["state"] for p in report["patches"]} == {"applied"}
    assert gitcmd.dirty_paths(gitcmd.open_repo(patched)) == []


def test_pip_install_of_the_patched_tree_is_verified_installed(patched, real_series, upstream_mirror, tmp_path):
    """`pip install ./Megatron-LM` (a wheel built by the tree's own setup, helpers compiled) and
    `pip install -e`: verify --installed names the release; the checkout still verifies (the
    build's leftovers are ignored by the tree's own .gitignore)."""
    import json

    pytest.importorskip("pybind11", reason="the tree's setup.py builds its helpers with pybind11 (in its requirements)")
    from tests.installing import install

    for editable in (False, True):
        python = install(patched, tmp_path / f"venv-{'editable' if editable else 'wheel'}", editable=editable)
        result = invoke(real_series, "verify", "--installed", "--python", str(python), "--json", "--upstream-url", str(upstream_mirror))
        assert result.stdout, result.stderr
        report = json.loads(result.stdout)
        assert result.exit_code == 0, report["differences"][:5]
        assert report["release"] == real_series.release
        assert {part["checkout"] for part in report["parts"]} == {editable}
        assert "megatron/core" in {part["prefix"] for part in report["parts"]} or report["parts"][0]["prefix"] == "megatron"
        # pip compiled every module at install time: --strict proves that bytecode is each source's own.
        strict = invoke(real_series, "verify", "--installed", "--strict", "--python", str(python), "--json", "--upstream-url", str(upstream_mirror))
        assert strict.exit_code == 0, json.loads(strict.stdout)["differences"][:5]
    assert invoke(real_series, "verify", "--target", str(patched)).exit_code == 0
