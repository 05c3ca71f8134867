"""--overlay DIR: a framework's own series stacked on a release's, through every command."""

from __future__ import annotations

import json
import os

import pytest

from rocmpatch import gitcmd, history, statcache
from rocmpatch.errors import ExitCode
from rocmpatch.schema import load_overlay_lock
from tests.fixtures import lock_of, make_overlay, replace_line, write_files

FRAMEWORK_B7 = "return 77  # framework\n"


@pytest.fixture
def overlay(tmp_path, upstream, project):
    return make_overlay(tmp_path / "framework" / "rocm-overlay", upstream, project)


def overlay_lock(directory):
    return load_overlay_lock(directory / "overlay.lock")


def test_apply_stacks_the_overlay_on_the_series_with_its_own_trailers(cli, project, overlay, upstream, tmp_path):
    target = tmp_path / "Megatron-LM"
    result = cli("apply", "--target", str(target), "--overlay", str(overlay))
    assert result.exit_code == 0, result.stderr
    assert "applied          framework-fix (overlay)" in result.stdout
    repo = gitcmd.open_repo(target)
    assert gitcmd.tree_of(repo, "HEAD") == overlay_lock(overlay).patched_tree
    assert overlay_lock(overlay).release_tree == lock_of(project).patched_tree
    assert FRAMEWORK_B7 in (target / "pkg/b.py").read_text() and (target / "pkg/framework.py").exists()
    state = history.read(repo, upstream.commit)
    assert state.base == upstream.commit and not state.user_commits
    assert [(a.layer, a.name) for a in state.applied] == [("release", "first-fix"), ("release", "second-fix"), ("overlay", "framework-fix")]
    trailers, _ = gitcmd.commit_links(repo, "HEAD")
    assert trailers[history.OVERLAY_NAME_TRAILER] == "framework-fix" and history.NAME_TRAILER not in trailers
    assert cli("verify", "--target", str(target), "--overlay", str(overlay)).exit_code == 0


def test_the_overlay_goes_on_a_target_that_has_the_series(cli, overlay, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    result = cli("apply", "--target", str(target), "--overlay", str(overlay))
    assert result.exit_code == 0, result.stderr
    assert "already applied  2 patches: first-fix ... second-fix" in result.stdout and "applied          framework-fix (overlay)" in result.stdout
    assert cli("verify", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    assert "nothing to do" in cli("apply", "--target", str(target), "--overlay", str(overlay)).stdout


def test_rocmpatch_overlay_variable_gives_the_overlay(cli, overlay, tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMPATCH_OVERLAY", str(overlay))
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    assert (target / "pkg/framework.py").exists()
    status = json.loads(cli("status", "--target", str(target), "--json").stdout)
    assert [(p["name"], p["layer"], p["state"]) for p in status["patches"]][-1] == ("framework-fix", "overlay", "applied")


def test_without_the_overlay_commands_say_the_target_carries_one(cli, overlay, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    head = gitcmd.head_commit(gitcmd.open_repo(target))
    for command in (["apply"], ["unapply"], ["unapply", "--force"]):
        result = cli(*command, "--target", str(target))
        assert result.exit_code == ExitCode.TARGET_REFUSED, (command, result.output)
        assert "patch(es) of an overlay" in result.stderr and "--overlay DIR" in result.stderr
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == head
    assert cli("verify", "--target", str(target)).exit_code == 1
    status = cli("status", "--target", str(target))
    assert status.exit_code == 0 and "patch(es) of an overlay on top (framework-fix)" in status.stdout


def test_unapply_with_the_overlay_goes_back_to_the_pin(cli, overlay, upstream, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    result = cli("unapply", "--target", str(target), "--overlay", str(overlay))
    assert result.exit_code == 0, result.output
    assert "removed  framework-fix" in result.stdout
    assert gitcmd.head_commit(gitcmd.open_repo(target)) == upstream.commit


def test_an_edit_amended_into_an_overlay_commit_is_the_users(cli, overlay, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    write_files(target, {"pkg/framework.py": "FRAMEWORK = 2\n"})
    gitcmd.run(gitcmd.open_repo(target), "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-a", "--amend", "--no-edit")
    result = cli("unapply", "--target", str(target), "--overlay", str(overlay))
    assert result.exit_code == ExitCode.TARGET_REFUSED and "patch framework-fix" in result.stderr
    status = json.loads(cli("status", "--target", str(target), "--overlay", str(overlay), "--json").stdout)
    assert status["patches"][-1]["state"] == "conflicting"


def test_verify_names_the_overlay_patch_of_a_changed_file(cli, overlay, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    write_files(target, {"pkg/b.py": (target / "pkg/b.py").read_text().replace(FRAMEWORK_B7, "return 7\n")})
    result = cli("verify", "--target", str(target), "--overlay", str(overlay), "--json")
    assert result.exit_code == 1
    [difference] = json.loads(result.stdout)["differences"]
    assert difference == {"path": "pkg/b.py", "kind": "edited", "patches": ["second-fix", "framework-fix"]}


def test_verify_compares_with_the_overlay_tree_computed_like_the_releases(cli, overlay, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay)).exit_code == 0
    patched = overlay_lock(overlay).patched_tree
    assert statcache.load(target).tree == patched  # apply records the stack's tree, so verify reads nothing again
    report = json.loads(cli("verify", "--target", str(target), "--overlay", str(overlay), "--json").stdout)
    assert report["ok"] and report["expected_tree"] == patched
    # The same size and mtime, other bytes: the stat cache does not take it (ctime moved), verify reads it.
    framework = target / "pkg/framework.py"
    stat = framework.stat()
    framework.write_text(framework.read_text().replace("1", "2"))
    os.utime(framework, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = cli("verify", "--target", str(target), "--overlay", str(overlay), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["differences"] == [{"path": "pkg/framework.py", "kind": "edited", "patches": ["framework-fix"]}]


def test_check_and_lock_refuse_an_overlay_that_no_longer_applies_naming_its_patch(cli, overlay, project):
    assert cli("check", "--overlay", str(overlay)).exit_code == 0
    patch = overlay / "0001-framework-fix.patch"
    patch.write_text(patch.read_text().replace("-    return 7\n", "-    return 8\n"))
    result = cli("check", "--overlay", str(overlay), "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)["releases"]["test_v1"]
    failed = [p for p in data["patches"] if not p["ok"]]
    assert [(p["name"], p["layer"]) for p in failed] == [("framework-fix", "overlay")]
    assert "framework-fix of the overlay" in failed[0]["error"] and "pkg/b.py, hunk 1" in failed[0]["error"]
    text = cli("check", "--overlay", str(overlay))
    assert "FAIL framework-fix" in text.stdout and "overlay " in text.stdout
    result = cli("lock", "--overlay", str(overlay))
    assert result.exit_code == ExitCode.PATCH_CONFLICT
    assert "patch framework-fix of the overlay" in result.stderr and "rocmpatch lock --overlay" in result.stderr


def test_lock_check_and_lock_for_the_overlay(cli, overlay, project):
    before = (overlay / "overlay.lock").read_bytes()
    release_lock = project.lock_path.read_bytes()
    assert cli("lock", "--check", "--overlay", str(overlay)).exit_code == 0
    patch = overlay / "0001-framework-fix.patch"
    # below the header (which lock writes from series.yaml): a note before the diff
    patch.write_bytes(patch.read_bytes().replace(b"\n---\n", b"\n---\nedited by hand\n", 1))
    result = cli("lock", "--check", "--overlay", str(overlay))
    assert result.exit_code == 1 and "is stale: patch framework-fix differ" in result.stdout
    refused = cli("apply", "--target", str(overlay.parent / "t"), "--overlay", str(overlay))
    assert refused.exit_code == ExitCode.INVALID_INPUT and "0001-framework-fix.patch" in refused.stderr
    result = cli("lock", "--overlay", str(overlay))
    assert result.exit_code == 0, result.output
    assert (overlay / "overlay.lock").read_bytes() != before
    assert project.lock_path.read_bytes() == release_lock  # the release's lock is not the framework's
    assert cli("lock", "--check", "--overlay", str(overlay)).exit_code == 0


def test_a_new_overlay_is_locked_for_the_release_asked_or_the_newest(cli, overlay, project):
    (overlay / "overlay.lock").unlink()
    result = cli("apply", "--target", str(overlay.parent / "t"), "--overlay", str(overlay))
    assert result.exit_code == ExitCode.INVALID_INPUT and "overlay.lock: file not found" in result.stderr
    assert cli("lock", "--overlay", str(overlay)).exit_code == 0
    assert overlay_lock(overlay).release == "test_v1"


def test_the_overlay_chooses_its_release_and_another_is_refused(cli, overlay, project, tmp_path):
    import shutil

    from rocmpatch.operations import locking
    from tests.fixtures import location_of

    shutil.copytree(project.series_dir, project.series_dir.parent / "test_v2")
    locking.write(location_of(project.series_dir.parent / "test_v2"), lock_of(project))
    patchsets = project.series_dir.parent
    result = cli("check", "--overlay", str(overlay), series_dir=patchsets)  # test_v2 is the newest, by name
    assert result.exit_code == 0, result.output
    assert f"release test_v1: the release {overlay / 'overlay.lock'} is locked for" in result.stderr
    result = cli("check", "--overlay", str(overlay), "--release", "test_v2", series_dir=patchsets)
    assert result.exit_code == ExitCode.USAGE and "is locked for release test_v1, not test_v2" in result.stderr
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--release", "test_v2", series_dir=patchsets).exit_code == 0
    result = cli("apply", "--target", str(target), "--overlay", str(overlay), series_dir=patchsets)
    assert result.exit_code == ExitCode.USAGE and "so it is release test_v2, not test_v1" in result.stderr
    assert cli("lock", "--overlay", str(overlay), "--release", "test_v2", series_dir=patchsets).exit_code == 0  # moved
    assert overlay_lock(overlay).release == "test_v2"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay), series_dir=patchsets).exit_code == 0


def test_an_overlay_patch_may_not_take_a_release_patch_name(cli, overlay):
    series_yaml = overlay / "series.yaml"
    series_yaml.write_text(series_yaml.read_text().replace("name: framework-fix", "name: second-fix"))
    result = cli("check", "--overlay", str(overlay))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert f"{series_yaml}: series[0].name" in result.stderr and "also a patch of release test_v1" in result.stderr


def test_a_folder_without_series_yaml_is_no_overlay(cli, tmp_path):
    result = cli("check", "--overlay", str(tmp_path))
    assert result.exit_code == ExitCode.INVALID_INPUT and "holds no series.yaml" in result.stderr


def test_drift_reports_overlay_patches_beside_the_releases(cli, overlay, upstream):
    result = cli("drift", "--overlay", str(overlay), "--ref", upstream.later, "--upstream-url", upstream.url, "--json")
    assert result.exit_code == 0, result.output
    patches = json.loads(result.stdout)["patches"]
    assert [(p["name"], p["layer"], p["state"]) for p in patches] == [
        ("first-fix", "release", "applies"), ("second-fix", "release", "applies"), ("framework-fix", "overlay", "applies")]


def test_rebase_carries_the_series_and_the_overlay(cli, overlay, project, upstream, tmp_path):
    result = cli("rebase", "--onto", upstream.later, "--upstream-url", upstream.url, "--overlay", str(overlay))
    assert result.exit_code == 0, result.output
    assert "framework-fix" in result.stdout and "overlay.lock written" in result.stdout
    release = lock_of(project)
    assert release.upstream.commit == upstream.later
    carried = overlay_lock(overlay)
    assert carried.release == "test_v1" and carried.release_tree == release.patched_tree
    assert cli("check", "--overlay", str(overlay), "--upstream-url", upstream.url).exit_code == 0
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), "--overlay", str(overlay), "--upstream-url", upstream.url).exit_code == 0
    assert (target / "pkg/b.py").read_text().endswith("# later\n") and FRAMEWORK_B7 in (target / "pkg/b.py").read_text()


def test_rebase_report_tries_the_overlay_s_patches_after_the_release_s(cli, overlay, upstream):
    result = cli("rebase", "--onto", upstream.later, "--report", "--json", "--upstream-url", upstream.url, "--overlay", str(overlay))
    assert result.exit_code == 0, result.output
    assert [(p["name"], p["layer"]) for p in json.loads(result.stdout)["patches"]] == [
        ("first-fix", "release"), ("second-fix", "release"), ("framework-fix", "overlay")]


def test_rebase_into_a_new_release_moves_the_overlay_there(cli, overlay, project, upstream):
    result = cli("rebase", "--onto", upstream.later, "--into", "test_v2", "--upstream-url", upstream.url, "--overlay", str(overlay),
                 series_dir=project.series_dir.parent)
    assert result.exit_code == 0, result.output
    assert overlay_lock(overlay).release == "test_v2"
    assert lock_of(project).upstream.commit == upstream.commit  # test_v1 as it was


def test_a_stopped_rebase_goes_on_with_its_overlay(cli, tmp_path, upstream, project):
    """The overlay's patch conflicts with upstream's later change; --continue takes the resolution
    and writes the overlay, whose lock then names the new pin's tree."""
    from rocmpatch.operations import rebase_state
    from tests.fixtures import MODULE_B, commit_all

    changed = replace_line(MODULE_B, "return 7\n", "return 70\n")
    write_files(upstream.path, {"pkg/b.py": changed + "# later\n"})
    newer = commit_all(upstream.path, "upstream changes b7")
    overlay = make_overlay(tmp_path / "ov", upstream, project)
    result = cli("rebase", "--onto", newer, "--upstream-url", upstream.url, "--overlay", str(overlay))
    assert result.exit_code == ExitCode.PATCH_CONFLICT, result.output
    assert "patch framework-fix conflicts in: pkg/b.py" in result.stderr
    worktree = rebase_state.state_dir(project.series_dir.parent.parent, "test_v1") / "worktree"
    b = worktree / "pkg/b.py"
    text = b.read_text()
    start, end = text.index("<<<<<<< "), text.index(">>>>>>> ")
    b.write_text(text[:start] + "    return 77  # framework\n" + text[text.index("\n", end) + 1:])
    result = cli("rebase", "--continue", "--overlay", str(tmp_path / "elsewhere"))
    assert result.exit_code == ExitCode.USAGE and "carries the overlay" in result.stderr
    result = cli("rebase", "--continue")
    assert result.exit_code == 0, result.output
    assert overlay_lock(overlay).release_tree == lock_of(project).patched_tree
    assert cli("lock", "--check", "--overlay", str(overlay), "--upstream-url", upstream.url).exit_code == 0
