from __future__ import annotations

import json

from rocmpatch.errors import ExitCode


def applied(cli, tmp_path):
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    return target


def test_patched_target_verifies(cli, tmp_path):
    target = applied(cli, tmp_path)
    result = cli("verify", "--target", str(target))
    assert result.exit_code == 0, result.stdout
    assert "verified" in result.stdout


def test_each_difference_named_with_its_kind(cli, tmp_path):
    target = applied(cli, tmp_path)
    (target / "pkg/a.py").write_text("edited\n")
    (target / "README.md").unlink()
    (target / "extra.txt").write_text("new\n")
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    report = json.loads(result.stdout)
    kinds = {d["path"]: d["kind"] for d in report["differences"]}
    assert kinds == {"pkg/a.py": "edited", "README.md": "deleted", "extra.txt": "added"}
    assert report["ok"] is False
    assert {d["path"]: d["patches"] for d in report["differences"]}["pkg/a.py"] == ["first-fix", "second-fix"]
    text = cli("verify", "--target", str(target)).stdout
    assert "data, checkpoints or logs" in text and "keep them outside the tree" in text, text


def test_untracked_nested_repositories_are_added_with_or_without_commits(cli, tmp_path):
    import subprocess

    target = applied(cli, tmp_path)
    empty, committed = target / "vendor/empty", target / "vendor/full"
    for nested in (empty, committed):
        subprocess.run(["git", "init", "-q", str(nested)], check=True)
        (nested / "code.py").write_text("x\n")
    subprocess.run(["git", "-C", str(committed), "add", "code.py"], check=True)
    subprocess.run(["git", "-C", str(committed), "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "x"], check=True)
    for present in ((empty, committed), (committed,)):
        result = cli("verify", "--target", str(target), "--json")
        assert result.exit_code == ExitCode.CHECK_FAILED, result.stdout
        kinds = {d["path"]: d["kind"] for d in json.loads(result.stdout)["differences"]}
        assert kinds == {str(p.relative_to(target)): "added" for p in present}
        subprocess.run(["rm", "-rf", str(empty)], check=True)


def test_ignored_build_products_are_not_differences(cli, upstream, tmp_path):
    """What upstream's own .gitignore ignores (built extensions, data, __pycache__) is no difference."""
    from tests.fixtures import make_series

    location = make_series(tmp_path / "ignoring", upstream, patches=[("ignore", {".gitignore": "data/\n*.so\n"})])
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), series_dir=location.series_dir).exit_code == 0
    (target / "data").mkdir()
    (target / "data/tiny_text_document.bin").write_bytes(b"\0" * 64)
    (target / "pkg/helpers.so").write_bytes(b"\x7fELF")
    result = cli("verify", "--target", str(target), series_dir=location.series_dir)
    assert result.exit_code == 0, result.stdout


def test_committed_edit_is_found(cli, tmp_path):
    from tests.fixtures import commit_all

    target = applied(cli, tmp_path)
    (target / "docs/guide.md").write_text("changed\n")
    commit_all(target, "my change")
    result = cli("verify", "--target", str(target))
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "edited         docs/guide.md" in result.stdout


def test_unpatched_target_reports_missing_patches(cli, tmp_path):
    target = applied(cli, tmp_path)
    assert cli("unapply", "--target", str(target)).exit_code == 0
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    report = json.loads(result.stdout)
    assert {d["path"]: d["kind"] for d in report["differences"]} == {
        "pkg/a.py": "patch-missing", "pkg/b.py": "patch-missing", "pkg/new.py": "patch-missing"}


def test_stale_lock_is_reported(cli, project, tmp_path):
    target = applied(cli, tmp_path)
    patch = project.series_dir / "0001-first-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"test patch", b"test patch, reworded"))
    result = cli("verify", "--target", str(target), "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    problems = json.loads(result.stdout)["lock_problems"]
    assert len(problems) == 1 and "0001-first-fix.patch: sha256" in problems[0]


def test_not_a_repo(cli, tmp_path):
    (tmp_path / "plain").mkdir()
    result = cli("verify", "--target", str(tmp_path / "plain"))
    assert result.exit_code == ExitCode.TARGET_REFUSED


def test_many_differences_are_summarised_and_json_has_them_all(cli, upstream, tmp_path):
    """A foreign checkout differs in thousands of paths: the text lists the first 20 and counts them
    by kind; --json lists every one."""
    import json
    import subprocess

    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", upstream.ref], check=True)
    for number in range(30):
        (target / f"data-{number:02}.txt").write_text("x\n")
    result = cli("verify", "--target", str(target))
    assert result.exit_code == 1
    listed = [line for line in result.stdout.splitlines() if line.startswith("added ")]
    assert len(listed) == 20
    assert any("path(s) differ (30 added" in line and "--json lists every one" in line for line in result.stdout.splitlines())
    everything = json.loads(cli("verify", "--target", str(target), "--json").stdout)["differences"]
    assert len([d for d in everything if d["kind"] == "added"]) == 30


def test_strict_after_normal_use_gives_the_lines_that_clean_exactly_that(cli, upstream, tmp_path):
    """Python's __pycache__ and built extensions, ignored by the tree's own .gitignore (a target's
    private excludes excuse nothing), next to an ignored log of the user's: verify --strict prints
    lines that remove exactly what it counts (no `git clean -X`)."""
    import subprocess

    from tests.fixtures import make_series

    location = make_series(tmp_path / "ignoring", upstream, patches=[("ignore", {".gitignore": "__pycache__/\n*.so\nlogs/\n"})])
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), series_dir=location.series_dir).exit_code == 0
    for package in ("pkg", "pkg/sub", "tools"):
        (target / package / "__pycache__").mkdir(parents=True, exist_ok=True)
        for number in range(12):
            (target / package / "__pycache__" / f"m{number}.cpython-311.pyc").write_bytes(b"\0")
    (target / "pkg/helpers.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    (target / "tools/fast.so").write_bytes(b"\0")
    (target / "logs").mkdir()
    (target / "logs/train.log").write_text("iteration 1\n")
    result = cli("verify", "--target", str(target), "--strict", series_dir=location.series_dir)
    assert result.exit_code == ExitCode.CHECK_FAILED
    lines = result.stdout.splitlines()
    start = lines.index("to remove the 38 ignored file(s):")
    commands = [line.strip() for line in lines[start + 1:start + 3]]
    assert commands[0] == f"find {target} -name __pycache__ -type d -prune -exec rm -rf {{}} +"
    assert commands[1] == f"rm -f -- {target}/pkg/helpers.cpython-311-x86_64-linux-gnu.so {target}/tools/fast.so"
    for command in commands:
        subprocess.run(["bash", "-c", command], check=True)
    assert cli("verify", "--target", str(target), "--strict", series_dir=location.series_dir).exit_code == 0
    assert (target / "logs/train.log").is_file()
