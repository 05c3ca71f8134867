"""A framework's pin on an untagged commit (issue 31 item 6): the steps docs/frameworks.md gives, run
as written against a throwaway upstream, end in a release of the user's own that `apply` and
`verify` take on a fresh checkout of that commit.

The upstream: tag v1.0 (the nearest release, test_v1, three patches), then untagged commits on main
that shift the context of one patch (it no longer applies exactly: 3-way) and change the lines of
another (a conflict the test resolves in the stop's worktree, as a user would). The docs' names
(core_v0.16.1, d3528a21, main-2026-03-06, ./Megatron-LM) are replaced by this upstream's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rocmpatch import gitcmd
from rocmpatch.cli import app
from rocmpatch.schema import load_lock_file, load_release_info
from tests.fixtures import MODULE_A, MODULE_B, commit_all, make_series, replace_line, tagged_upstream, write_files

FRAMEWORKS = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
SECTION = "## A commit no release pins"


# In the v1.0 code: b5 and the lines the patches touch.
B5 = "def b5():\n    return 5\n"
PATCHES = [
    ("offset-fix", {"pkg/a.py": replace_line(MODULE_A, "return 3\n", "return 33  # rocm\n")}),
    ("conflict-fix", {"pkg/b.py": replace_line(MODULE_B, B5, "def b5():\n    return 55  # rocm\n")}),
    ("new-module", {"pkg/rocm.py": "ROCM = True\n"}),
]
RELEASE_YAML = """\
# The nearest release's release.yaml, as a clone of rocmpatch has it.
default: true
wheel:
  requirement: megatron-core==1.0.0
  python: '3.12'
features: []
install:
- {command: pip install numpy, why: the tree imports it}
validated:
- {platform: cpu, date: '2026-11-26', hardware: a test, what: nothing}
"""
# Upstream after the tag: a header above a.py's code (offset-fix's context moves), and b5 takes an
# argument (conflict-fix's lines change).
HEADER = "".join(f"# upstream header line {n}\n" for n in range(1, 6))
B5_UPSTREAM = "def b5(scale=1):\n    return 5 * scale\n"
B5_RESOLVED = "def b5(scale=1):\n    return 55 * scale  # rocm\n"


def documented_steps() -> list[str]:
    """The shell lines of the section's bash block, without comments or blank lines."""
    text = FRAMEWORKS.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def documented_names(steps: list[str]) -> tuple[str, str, str]:
    """The docs' release, untagged commit and new release, read from their `--into` line (so this test
    names no release itself: a release is data)."""
    into = next(shlex.split(line) for line in steps if "--into" in line)
    return tuple(into[into.index(option) + 1] for option in ("--release", "--onto", "--into"))


def hunk_starts(patch: Path) -> list[int]:
    return [int(n) for n in re.findall(r"^@@ -(\d+),", patch.read_text(), re.M)]


def invoke(args: list[str]):
    return CliRunner(env={"COLUMNS": "200"}).invoke(app, args)


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".git" not in p.parts}


@pytest.mark.parametrize("kept_in_git", [False, True], ids=["my-series-plain", "my-series-in-git"])
def test_the_documented_steps_give_a_verified_release_for_an_untagged_commit(tmp_path, monkeypatch, kept_in_git):
    # The nearest release: v1.0 with three patches, in a "clone of rocmpatch" (its patchsets/ and lock).
    upstream = tagged_upstream(tmp_path, {"README.md": "upstream\n", "pkg/__init__.py": "", "pkg/a.py": MODULE_A, "pkg/b.py": MODULE_B})
    location = make_series(tmp_path / "rocmpatch", upstream, PATCHES)
    (location.series_dir / "release.yaml").write_text(RELEASE_YAML)
    release = location.release
    # Upstream moves on, untagged: what a framework pins.
    write_files(upstream.path, {"pkg/a.py": HEADER + MODULE_A})
    commit_all(upstream.path, "a: a header")
    write_files(upstream.path, {"pkg/b.py": replace_line(MODULE_B, B5, B5_UPSTREAM)})
    untagged = commit_all(upstream.path, "b: b5 scales")
    date = gitcmd.run(upstream.path, "log", "-1", "--format=%cs", untagged)
    new_release = f"main-{date}"  # named for the commit's date, as the docs say
    short = untagged[:8]

    steps = documented_steps()
    assignment = next(line for line in steps if line.startswith("S="))
    series_args = shlex.split(assignment.partition("=")[2])[0]
    # The docs' names -> this test's (the untagged commit and the new release are known only once made).
    names = dict(zip(documented_names(steps), (release, short, new_release)))
    commands = []
    for line in steps:
        for old, new in names.items():
            line = line.replace(old, new)
        for part in line.replace("$S", series_args).split("&&"):
            commands.append(shlex.split(part))
    shell = [c for c in commands if c[0] != "rocmpatch" and not c[0].startswith("S=")]
    commands = [c[1:] for c in commands if c[0] == "rocmpatch"]
    assert [c[0] for c in shell] == ["mkdir", "cp"]
    # The last, smoke, needs a Megatron-LM tree: not run here.
    assert [c[0] for c in commands] == ["rebase", "rebase", "rebase", "check", "lock", "apply", "verify", "smoke"]

    # mkdir my-series && cp -r rocmpatch/patchsets rocmpatch/upstream.lock my-series/
    monkeypatch.chdir(tmp_path)
    for command in shell:
        subprocess.run(command, check=True, cwd=tmp_path)
    user = tmp_path / "my-series"
    assert snapshot(user / "patchsets") == snapshot(location.series_dir.parent)
    if kept_in_git:  # the user keeps the copy in a repository of theirs: the rebase state goes in its .git
        gitcmd.init_repo(user)
        commit_all(user, "my series")
    state = user / ((".git/rocmpatch-rebase-" if kept_in_git else ".rocmpatch-rebase-") + release)
    clone_before = snapshot(tmp_path / "rocmpatch")

    # --report: the size of the port, nothing written.
    report, start, resume, check, lock_check, apply, verify = commands[:7]
    assert "--report" in report
    result = invoke(report)
    assert result.exit_code == 0, result.output
    assert "3 patches: 1 exact, 1 3-way, 1 conflict" in result.stdout
    assert not (user / "patchsets" / new_release).exists()

    # --into: stops at conflict-fix, in the worktree the docs name.
    result = invoke(start)
    assert result.exit_code == 4, result.output
    worktree = state / "worktree"
    assert "patch conflict-fix conflicts in: pkg/b.py (both changed)" in result.stderr
    assert f"the worktree: {worktree} " in result.stderr
    assert not (user / "patchsets" / new_release).exists()

    # --continue before anything is resolved is refused (issue 31 item 7), nothing written.
    before = snapshot(user / "patchsets")
    result = invoke(resume)
    assert result.exit_code == 3, result.output
    assert "patch conflict-fix is not resolved: pkg/b.py:" in result.stderr
    assert snapshot(user / "patchsets") == before

    # Resolve as a user would: upstream's new signature with the patch's value, markers gone.
    conflicted = (worktree / "pkg" / "b.py").read_text()
    assert "<<<<<<< " in conflicted and "return 55  # rocm" in conflicted and "return 5 * scale" in conflicted
    (worktree / "pkg" / "b.py").write_text(replace_line(MODULE_B, B5, B5_RESOLVED))
    result = invoke(resume)
    assert result.exit_code == 0, result.output
    assert not state.exists()

    # The user's own release: folder and lock entry pinning the untagged commit; the old release and
    # the clone of rocmpatch as they were.
    folder = user / "patchsets" / new_release
    assert sorted(p.name for p in folder.iterdir()) == [
        "0001-offset-fix.patch", "0002-conflict-fix.patch", "0003-new-module.patch", "release.yaml", "series.yaml"]
    lock = load_lock_file(user / "upstream.lock").releases
    assert lock[new_release].upstream.commit == untagged and lock[new_release].upstream.url == upstream.url
    assert lock[release] == load_lock_file(tmp_path / "rocmpatch" / "upstream.lock").releases[release]
    assert snapshot(user / "patchsets" / release) == snapshot(location.series_dir)
    assert snapshot(tmp_path / "rocmpatch") == clone_before
    assert hunk_starts(folder / "0001-offset-fix.patch") == [n + HEADER.count("\n") for n in hunk_starts(location.series_dir / "0001-offset-fix.patch")]
    assert "+    return 55 * scale  # rocm" in (folder / "0002-conflict-fix.patch").read_text()
    info = load_release_info(folder)  # carried over: not the default, no wheel, validated nowhere
    assert not info.default and info.wheel is None and info.validated == ()

    # check, lock --check; then apply to a fresh checkout of the untagged commit, and verify it.
    for command in (check, lock_check):
        result = invoke(command)
        assert result.exit_code == 0, result.output
    assert "--release" in check and new_release in check
    result = invoke(apply)
    assert result.exit_code == 0, result.output
    target = tmp_path / "Megatron-LM"
    result = invoke(verify)
    assert result.exit_code == 0, result.output
    assert new_release in result.stdout
    assert (target / "pkg" / "a.py").read_text() == HEADER + replace_line(MODULE_A, "return 3\n", "return 33  # rocm\n")
    assert (target / "pkg" / "b.py").read_text() == replace_line(MODULE_B, B5, B5_RESOLVED)
    assert (target / "pkg" / "rocm.py").read_text() == "ROCM = True\n"
    history = gitcmd.run(target, "log", "--format=%H", f"-{len(PATCHES) + 1}").split()
    assert history[-1] == untagged  # the checkout is the untagged commit plus the series

    # Checking each series.yaml entry against the new tree (as the docs ask) edits the folder: the
    # lock says so until `lock --release` writes it again, and the tree still verifies.
    entries = yaml.safe_load((folder / "series.yaml").read_text())
    entries["series"][1]["description"] = "Keeps upstream's scale argument of b5.\n"
    (folder / "series.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))
    assert invoke(lock_check).exit_code != 0
    result = invoke(["lock", *shlex.split(series_args), "--release", new_release])
    assert result.exit_code == 0, result.output
    for command in (lock_check, check, verify):
        result = invoke(command)
        assert result.exit_code == 0, result.output
