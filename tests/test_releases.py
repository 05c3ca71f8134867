"""Several releases side by side: choosing, detecting and refusing, on real git repositories."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rocmpatch import gitcmd, releases
from rocmpatch.operations import locking
from rocmpatch.cli import app
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.schema import load_release_info
from tests.cli_process import run_rocmpatch
from tests.fixtures import DEFAULT_PATCHES, location_of, lock_of, patch_texts, write_lock, write_series
from tests.upstream_history import make_history, write_project


@pytest.fixture
def two_releases(tmp_path, upstream):
    """test_v1 pinned at the tag, test_v2 (newer, the default) at the commit after it; the same two patches."""
    root = tmp_path / "proj"
    first = write_series(root, patch_texts(upstream, DEFAULT_PATCHES), release="test_v1", headers=True)
    write_lock(first, locking.Pin(upstream.url, upstream.ref, upstream.commit))
    second = write_series(root, patch_texts(upstream, DEFAULT_PATCHES), release="test_v2", headers=True)
    write_lock(second, locking.Pin(upstream.url, "main", upstream.later))
    (second.series_dir / "release.yaml").write_text("default: true\n")
    return first, second


def invoke(*args: str, env: dict | None = None):
    return CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(app, list(args))


def test_one_lock_holds_both_releases_and_writing_one_keeps_the_other(two_releases, upstream):
    first, second = two_releases
    assert lock_of(first).upstream.commit == upstream.commit
    assert lock_of(second).upstream.commit == upstream.later
    text = first.lock_path.read_text()
    assert text.index("test_v1:") < text.index("test_v2:")  # oldest pin first


def test_a_new_target_gets_the_default_release_and_is_told(two_releases, tmp_path):
    patchsets = two_releases[0].patchsets.root
    result = invoke("apply", "--target", str(tmp_path / "t"), "--series-dir", str(patchsets))
    assert result.exit_code == 0, result.output
    assert "release test_v2: the default" in result.stderr
    assert "of test_v2 applied" in result.stdout


def test_the_default_is_what_release_yaml_says_not_the_newest_pin(two_releases, tmp_path):
    first, second = two_releases
    (second.series_dir / "release.yaml").unlink()
    (first.series_dir / "release.yaml").write_text("default: true\n")
    result = invoke("apply", "--target", str(tmp_path / "t"), "--series-dir", str(first.patchsets.root))
    assert result.exit_code == 0, result.output
    assert "release test_v1: the default" in result.stderr
    listed = json.loads(invoke("releases", "--series-dir", str(first.patchsets.root), "--json").stdout)["releases"]
    assert {r["name"]: r["default"] for r in listed} == {"test_v1": True, "test_v2": False}
    table = invoke("releases", "--series-dir", str(first.patchsets.root)).stdout
    assert "test_v1 (default)" in table and "test_v2 (default)" not in table


@pytest.mark.parametrize("defaults", [(), ("test_v1", "test_v2")])
def test_no_default_or_two_is_one_clear_line(two_releases, tmp_path, defaults):
    first, second = two_releases
    for location in (first, second):
        (location.series_dir / "release.yaml").write_text(
            "default: true\n" if location.release in defaults else "default: false\n")
    for command in (["apply", "--target", str(tmp_path / "t")], ["releases"]):
        result = invoke(*command, "--series-dir", str(first.patchsets.root))
        assert result.exit_code == ExitCode.INVALID_INPUT, result.output
        if defaults:
            assert "test_v1/release.yaml:1: default: true here and in " in result.stderr
            assert "test_v2/release.yaml:1" in result.stderr
        else:
            assert "holds several releases (test_v1, test_v2) and no release.yaml says 'default: true'" in result.stderr
        assert not (tmp_path / "t").exists()
    assert invoke("apply", "--target", str(tmp_path / "t"), "--series-dir", str(first.patchsets.root),
                  "--release", "test_v1").exit_code == 0  # asked: no default needed


def test_an_existing_target_is_detected_and_a_disagreeing_flag_refused(two_releases, tmp_path, upstream):
    patchsets = str(two_releases[0].patchsets.root)
    target = tmp_path / "t"
    assert invoke("apply", "--target", str(target), "--series-dir", patchsets, "--release", "test_v1").exit_code == 0
    for command in ("verify", "status", "apply"):
        result = invoke(command, "--target", str(target), "--series-dir", patchsets)
        assert result.exit_code == 0, (command, result.output)
        assert "release test_v1:" in result.stderr and "based on its pin" in result.stderr
    refused = invoke("verify", "--target", str(target), "--series-dir", patchsets, "--release", "test_v2")
    assert refused.exit_code == ExitCode.USAGE
    assert "is release test_v1" in refused.output and "not test_v2" in refused.output
    env_refused = invoke("unapply", "--target", str(target), "--series-dir", patchsets, env={"ROCMPATCH_RELEASE": "test_v2"})
    assert env_refused.exit_code == ExitCode.USAGE
    assert invoke("unapply", "--target", str(target), "--series-dir", patchsets).exit_code == 0
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


def test_a_user_commit_on_top_still_names_the_release(two_releases, tmp_path):
    patchsets = two_releases[0].patchsets.root
    target = tmp_path / "t"
    assert invoke("apply", "--target", str(target), "--series-dir", str(patchsets), "--release", "test_v1").exit_code == 0
    (target / "mine.txt").write_text("mine\n")
    gitcmd.run(target, "add", "mine.txt")
    gitcmd.run(target, "-c", "user.name=me", "-c", "user.email=me@example.com", "commit", "-q", "-m", "mine")
    choice = releases.choose(patchsets, None, target=target)
    assert choice.release == "test_v1" and choice.how == releases.DETECTED


def test_unknown_release_lists_what_there_is(two_releases):
    with pytest.raises(UsageError, match="no release 'nope'") as raised:
        releases.choose(two_releases[0].patchsets.root, "nope")
    assert "test_v1, test_v2" in raised.value.hint


def test_check_and_lock_check_cover_every_release(two_releases):
    patchsets = str(two_releases[0].patchsets.root)
    result = invoke("check", "--series-dir", patchsets, "--json")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["releases"]) == ["test_v1", "test_v2"]
    assert invoke("lock", "--check", "--series-dir", patchsets).exit_code == 0
    repin = invoke("lock", "--series-dir", patchsets, "--commit", "0" * 40)
    assert repin.exit_code == ExitCode.USAGE and "--release" in repin.output


def test_releases_lists_pins_and_validation(two_releases):
    first, _ = two_releases
    (first.series_dir / "release.yaml").write_text(
        "validated:\n- platform: cpu\n  date: '2026-11-23'\n  hardware: test box\n  what: tests\n")
    result = invoke("releases", "--series-dir", str(first.patchsets.root), "--json")
    assert result.exit_code == 0, result.output
    listed = {r["name"]: r for r in json.loads(result.stdout)["releases"]}
    assert listed["test_v1"]["validated"][0]["platform"] == "cpu" and listed["test_v1"]["patches"] == 2
    assert listed["test_v2"]["default"] is True and listed["test_v2"]["validated"] == []


def test_a_bad_platform_in_release_yaml_names_file_and_line(two_releases):
    first, _ = two_releases
    (first.series_dir / "release.yaml").write_text(
        "validated:\n- platform: tpu\n  date: '2026-11-23'\n  hardware: x\n  what: y\n")
    result = invoke("releases", "--series-dir", str(first.patchsets.root))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "release.yaml:2: validated[0].platform" in result.output


def test_an_unknown_feature_in_release_yaml_is_one_line_naming_file_and_line(two_releases):
    first, _ = two_releases
    (first.series_dir / "release.yaml").write_text("features: [sdpa-causal,\n  sdpa-casual]\n")
    result = invoke("releases", "--series-dir", str(first.patchsets.root))
    assert result.exit_code == ExitCode.INVALID_INPUT
    [line] = [line for line in result.output.splitlines() if "release.yaml" in line]
    assert "release.yaml:2: features[1]: unknown feature 'sdpa-casual'; expected one of triton-optional," in line


@pytest.mark.parametrize("text, where", [
    ("wheel: {none: no wheel holds main's bytes, python: '3.12'}\n", "release.yaml:1: wheel.python: none: and python: together"),
    ("wheel: {python: '3.12'}\n", "release.yaml:1: wheel.requirement: missing"),
])
def test_wheel_is_a_requirement_or_none_with_a_reason(two_releases, text, where):
    first, _ = two_releases
    (first.series_dir / "release.yaml").write_text(text)
    result = invoke("releases", "--series-dir", str(first.patchsets.root))
    assert result.exit_code == ExitCode.INVALID_INPUT and where in result.output, result.output


def test_features_and_a_wheel_reason_are_read(tmp_path):
    (tmp_path / "release.yaml").write_text("wheel: {none: main between two releases}\nfeatures: [mla, mtp]\n")
    info = load_release_info(tmp_path)
    assert (info.wheel, info.no_wheel, info.features) == (None, "main between two releases", ("mla", "mtp"))
    assert load_release_info(tmp_path / "nowhere").features is None  # no release.yaml: nothing declared


def test_rebase_into_a_new_release_leaves_the_old_one(tmp_path):
    history = make_history(tmp_path)
    write_project(history, tmp_path / "project", "https://example.invalid/upstream.git")
    gitcmd.run(history.project, "init", "-q")
    old = location_of(history.series_dir)
    (old.series_dir / "release.yaml").write_text(
        "# the default\ndefault: true\nwheel: {requirement: megatron-core==1.0, python: '3.12'}\n"
        "validated:\n- platform: cpu\n  date: '2026-11-23'\n  hardware: test box\n  what: tests\n"
        "# the profile\nsmoke:\n  imports:\n    core: [pkg]\n")
    before = {p.name: p.read_bytes() for p in old.series_dir.iterdir()}
    common = ["--series-dir", str(history.series_dir), "--upstream-url", str(history.repo)]
    result = invoke("rebase", "--onto", history.commits["m2"], "--into", "test_v2", *common)
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in old.series_dir.iterdir()} == before
    new = location_of(old.patchsets.root / "test_v2")
    carried = load_release_info(new.series_dir)  # the smoke profile comes along; no validation, default or wheel does
    assert carried.smoke.plain() == {"imports": {"core": ["pkg"]}} and carried.validated == ()
    assert not carried.default and carried.wheel is None
    assert "# the profile" in (new.series_dir / "release.yaml").read_text()
    assert "# the default" not in (new.series_dir / "release.yaml").read_text()
    assert lock_of(new).upstream.commit == history.commits["m2"]
    assert lock_of(old).upstream.commit == history.pin
    assert invoke("check", "--series-dir", str(old.patchsets.root), "--upstream-url", str(history.repo)).exit_code == 0
    again = invoke("rebase", "--onto", "main", "--into", "test_v2", *common)
    assert again.exit_code == ExitCode.USAGE and "already exists" in again.output


def test_release_yaml_is_read_once_per_command(two_releases, tmp_path, monkeypatch):
    from collections import Counter

    from rocmpatch import series as series_module

    reads: Counter = Counter()
    real = series_module.load_release_info

    def counting(directory):
        reads[directory.name] += 1
        return real(directory)

    monkeypatch.setattr(series_module, "load_release_info", counting)
    patchsets = str(two_releases[0].patchsets.root)
    both = {"test_v1": 1, "test_v2": 1}
    for command, expected in ((["releases"], both), (["apply", "--target", str(tmp_path / "t")], both),
                              (["verify", "--target", str(tmp_path / "t")], {})):  # detected: no default needed
        reads.clear()
        result = invoke(*command, "--series-dir", patchsets)
        assert result.exit_code == 0, result.output
        assert dict(reads) == expected, command


def test_the_bundled_releases_fit_80_columns_with_every_name_and_commit_whole():
    """Each commit date and each validated platform is a line of its own, so no word folds at 80 (a
    process of its own: the console takes its width once per process)."""
    result = run_rocmpatch("releases", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) <= 80
    for summary in json.loads(invoke("releases", "--json").stdout)["releases"]:
        [row] = [line for line in result.stdout.splitlines() if summary["commit"][:12] in line]
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        assert cells[0].startswith(summary["name"]) and cells[1] == summary["ref"], row
        assert summary["date"][:10] in result.stdout
