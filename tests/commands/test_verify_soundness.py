"""verify's answer comes only from bytes rocmpatch reads itself (issue 23): the target's own git
state (index, attributes, replace refs, sparse-checkout, case settings) cannot make a changed tree
"verified", verify writes nothing, --strict sees what Python could import from ignored files, a
cache with a swapped blob makes no new target, and symlinks are judged where they resolve.
Real git repositories throughout."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zlib
from pathlib import Path

import pytest

from rocmpatch import store
from rocmpatch.errors import ExitCode
from tests.commands.test_data_safety import new_file_patch, replace_patch
from tests.fixtures import make_series, write_series


def plain_git_environment() -> dict[str, str]:
    """The environment a user's git runs in: without the settings importing rocmpatch gave this
    process (no replace refs, no autocrlf, ...), which would hide the very cases tested here."""
    return {name: value for name, value in os.environ.items() if not name.startswith(("GIT_CONFIG_", "GIT_NO_REPLACE", "GIT_ATTR"))}


def git(target: Path, *args: str, **kwargs) -> str:
    return subprocess.run(["git", "-C", str(target), *args], check=True, capture_output=True, text=True,
                          env=plain_git_environment(), **kwargs).stdout


def applied(cli, tmp_path) -> Path:
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target)).exit_code == 0
    return target


def differences(cli, target: Path, *extra: str) -> dict[str, str]:
    result = cli("verify", "--target", str(target), "--json", *extra)
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    return {d["path"]: d["kind"] for d in json.loads(result.stdout)["differences"]}


def git_sees_nothing(target: Path) -> None:
    """The case is real: git itself takes the tree for clean."""
    assert git(target, "status", "--porcelain", "--untracked-files=all") == ""


# 1. the target's index ------------------------------------------------------------------------


def forge_index_stat(target: Path, path: str) -> None:
    """Give `path`'s index entry the file's current stat data, keeping its blob id: git then takes
    the edited file for unchanged (the cache-tree still names the patched trees)."""
    index = target / ".git/index"
    data = bytearray(index.read_bytes())
    assert data[:4] == b"DIRC" and int.from_bytes(data[4:8], "big") == 2
    info = os.lstat(target / path)
    offset = 12
    for _ in range(int.from_bytes(data[8:12], "big")):
        length = int.from_bytes(data[offset + 60:offset + 62], "big") & 0xFFF
        if bytes(data[offset + 62:offset + 62 + length]) == path.encode():
            fields = [info.st_ctime_ns // 10**9, info.st_ctime_ns % 10**9, info.st_mtime_ns // 10**9, info.st_mtime_ns % 10**9,
                      info.st_dev & 0xFFFFFFFF, info.st_ino & 0xFFFFFFFF]
            for number, value in enumerate(fields):
                data[offset + 4 * number:offset + 4 * number + 4] = value.to_bytes(4, "big")
            data[offset + 36:offset + 40] = info.st_size.to_bytes(4, "big")
            break
        offset += (62 + length + 8) & ~7
    else:
        raise AssertionError(f"{path} not in the index")
    data[-20:] = hashlib.sha1(bytes(data[:-20])).digest()
    index.write_bytes(bytes(data))


def test_an_index_forged_after_the_change_does_not_fool_verify(cli, tmp_path):
    target = applied(cli, tmp_path)
    edited = target / "pkg/a.py"
    text = edited.read_text()
    edited.write_text(text.replace("return 1717", "return 6666"))  # the same size
    old = os.stat(edited).st_mtime_ns - 10**10
    os.utime(edited, ns=(old, old))  # not racily clean for git
    forge_index_stat(target, "pkg/a.py")
    git_sees_nothing(target)
    assert differences(cli, target) == {"pkg/a.py": "edited"}


# 2. sparse checkout ---------------------------------------------------------------------------


def test_sparse_checkout_hiding_an_edit_or_leaving_files_out(cli, tmp_path):
    target = applied(cli, tmp_path)
    git(target, "sparse-checkout", "set", "--no-cone", "/pkg/")
    assert not (target / "README.md").exists()
    assert differences(cli, target) == {"README.md": "deleted", "alias": "deleted", "docs/guide.md": "deleted"}
    git(target, "config", "sparse.expectFilesOutsideOfPatterns", "true")
    (target / "README.md").write_text("not upstream\n")
    (target / "docs").mkdir()
    (target / "docs/guide.md").write_text("guide\n")  # as upstream has it
    (target / "alias").symlink_to("pkg")
    git_sees_nothing(target)
    assert differences(cli, target) == {"README.md": "edited"}


# 3. replace refs ------------------------------------------------------------------------------


def test_a_replace_ref_checking_out_other_content_is_seen(cli, tmp_path):
    target = applied(cli, tmp_path)
    blob = git(target, "rev-parse", "HEAD:pkg/b.py").strip()
    other = git(target, "hash-object", "-w", "--stdin", input="print('not upstream')\n").strip()
    git(target, "replace", blob, other)
    (target / "pkg/b.py").unlink()
    git(target, "checkout", "--", "pkg/b.py")
    # As after any later git command: the index stamped after the file, so git trusts its stat data.
    later = os.stat(target / "pkg/b.py").st_mtime_ns + 10**10
    os.utime(target / ".git/index", ns=(later, later))
    assert "not upstream" in (target / "pkg/b.py").read_text()
    git_sees_nothing(target)
    assert differences(cli, target) == {"pkg/b.py": "edited"}


# 4. attributes and line endings ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["info/attributes", "core.autocrlf", "core.attributesFile"])
def test_a_crlf_rewrite_is_an_edit_whatever_the_attributes_say(cli, tmp_path, how):
    target = applied(cli, tmp_path)
    if how == "info/attributes":
        (target / ".git/info/attributes").write_text("* text eol=crlf\n")
    elif how == "core.autocrlf":
        git(target, "config", "core.autocrlf", "true")
    else:
        attributes = tmp_path / "attributes"
        attributes.write_text("* text eol=crlf\n")
        git(target, "config", "core.attributesFile", str(attributes))
    edited = target / "pkg/b.py"
    edited.write_bytes(edited.read_bytes().replace(b"\n", b"\r\n"))
    git(target, "add", "pkg/b.py")  # stored as the same blob: git converts the line endings back
    git_sees_nothing(target)
    assert differences(cli, target) == {"pkg/b.py": "edited"}


# 5. case settings --------------------------------------------------------------------------------


def test_ignore_case_does_not_hide_a_new_file_beside_an_old_one(cli, tmp_path):
    target = applied(cli, tmp_path)
    git(target, "config", "core.ignoreCase", "true")
    (target / "pkg/A.py").write_text("import os\n")
    git_sees_nothing(target)
    assert differences(cli, target) == {"pkg/A.py": "added"}


# 6. verify writes nothing into the target ----------------------------------------------------------


def dot_git_state(target: Path) -> dict[str, tuple[int, bytes]]:
    state = {}
    for folder, _, files in os.walk(target / ".git"):
        for name in files:
            path = Path(folder, name)
            state[str(path.relative_to(target))] = (path.lstat().st_mtime_ns, path.read_bytes())
    return state


def test_verify_leaves_the_targets_git_directory_as_it_was(cli, tmp_path):
    target = applied(cli, tmp_path)
    for path in (target / "pkg").iterdir():  # stat data git would refresh into its index
        os.utime(path)
    before = dot_git_state(target)
    assert cli("verify", "--target", str(target)).exit_code == 0
    (target / "pkg/a.py").write_text("edited\n")
    (target / "extra.py").write_text("new\n")
    assert cli("verify", "--target", str(target), "--strict").exit_code == ExitCode.CHECK_FAILED
    assert dot_git_state(target) == before


@pytest.mark.parametrize("applied_here", [True, False])
def test_read_only_commands_leave_the_index_as_it_was(cli, upstream, tmp_path, applied_here):
    """verify, status and apply --dry-run change nothing: not even the stat data git status would
    refresh into .git/index (rocmpatch's git status runs without optional locks)."""
    if applied_here:
        target = applied(cli, tmp_path)
    else:
        target = tmp_path / "clone"
        subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
        git(target, "checkout", "-q", upstream.ref)
    old = os.stat(target / ".git/index").st_mtime_ns - 5 * 10**9
    os.utime(target / ".git/index", ns=(old, old))  # older than every file below: their stat data is stale
    for path in (target / "pkg").iterdir():
        os.utime(path)
    index = target / ".git/index"
    before = (index.stat().st_mtime_ns, index.read_bytes())
    for command in (["verify"], ["status"], ["apply", "--dry-run"], ["verify", "--strict"]):
        result = cli(*command, "--target", str(target))
        assert result.exit_code in (0, 1), result.output
        assert (index.stat().st_mtime_ns, index.read_bytes()) == before, command
        assert not (target / ".git/index.lock").exists()


# 7. --strict: ignored files Python could import --------------------------------------------------


IGNORING = [("ignore", {".gitignore": "__pycache__/\ndata/\nhidden_too.py\n"})]  # upstream's own .gitignore, as the series makes it


def test_strict_reports_ignored_importable_files(cli, upstream, tmp_path):
    location = make_series(tmp_path / "ignoring", upstream, patches=IGNORING)
    target = tmp_path / "t"
    assert cli("apply", "--target", str(target), series_dir=location.series_dir).exit_code == 0
    (target / "hidden_too.py").write_text("import os\n")
    (target / "pkg/__pycache__").mkdir()
    (target / "pkg/__pycache__/a.cpython-311.pyc").write_bytes(b"\x00crafted")
    (target / "data").mkdir()
    (target / "data/set.bin").write_bytes(b"\0" * 16)
    git_sees_nothing(target)
    assert cli("verify", "--target", str(target), series_dir=location.series_dir).exit_code == 0  # ignored files are not counted
    result = cli("verify", "--target", str(target), "--json", "--strict", series_dir=location.series_dir)
    assert result.exit_code == ExitCode.CHECK_FAILED
    report = json.loads(result.stdout)
    assert {d["path"]: d["kind"] for d in report["differences"]} == {"hidden_too.py": "ignored", "pkg/__pycache__/a.cpython-311.pyc": "ignored"}
    assert report["strict"] is True
    result = cli("verify", "--target", str(target), "--strict", series_dir=location.series_dir)
    assert "ignored        hidden_too.py" in result.stdout and "--strict" in result.stdout
    (target / "hidden_too.py").unlink()
    (target / "pkg/__pycache__/a.cpython-311.pyc").unlink()
    assert cli("verify", "--target", str(target), "--strict", series_dir=location.series_dir).exit_code == 0  # data is not code


def test_the_targets_own_excludes_hide_nothing(cli, tmp_path):
    """.git/info/exclude and core.excludesFile are the target's private git state: they hide a new
    module from git, never from verify (only upstream's own .gitignore files excuse a file)."""
    target = applied(cli, tmp_path)
    excludes = tmp_path / "excludes"
    excludes.write_text("hidden_too.py\n")
    git(target, "config", "core.excludesFile", str(excludes))
    (target / ".git/info/exclude").write_text("pkg/evil.py\ndata/\n")
    (target / "pkg/evil.py").write_text("import os\n")
    (target / "hidden_too.py").write_text("import os\n")
    (target / "data").mkdir()
    (target / "data/set.bin").write_bytes(b"\0" * 16)
    git_sees_nothing(target)
    assert differences(cli, target) == {"pkg/evil.py": "added", "hidden_too.py": "added", "data/set.bin": "added"}
    result = cli("verify", "--target", str(target))
    assert "keep them outside the tree" in result.stdout


def test_an_untracked_gitignore_hides_nothing(cli, tmp_path):
    target = applied(cli, tmp_path)
    (target / "pkg/.gitignore").write_text("*\n")
    (target / "pkg/evil.py").write_text("import os\n")
    git_sees_nothing(target)
    assert differences(cli, target)["pkg/.gitignore"] == "added"


# 8. rocmpatch's own stat cache -------------------------------------------------------------------


def test_apply_records_what_it_hashed_and_verify_never_trusts_a_changed_file(cli, project, tmp_path):
    from rocmpatch import statcache
    from tests.fixtures import lock_of

    target = applied(cli, tmp_path)
    patched = lock_of(project).patched_tree
    recorded = statcache.load(target)
    assert recorded is not None and recorded.tree == patched
    assert set(recorded.files) == set(git(target, "ls-files", "-z").split("\0")) - {""}
    # Changed the same size, its mtime put back: the ctime moved, verify reads it.
    edited = target / "pkg/b.py"
    before = os.stat(edited)
    edited.write_text(edited.read_text().replace("return 55", "return 66"))
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert differences(cli, target) == {"pkg/b.py": "edited"}
    # An existing checkout: unapply, apply again; the record follows the files apply changed.
    edited.write_text(edited.read_text().replace("return 66", "return 55"))
    assert cli("verify", "--target", str(target)).exit_code == 0
    assert cli("unapply", "--target", str(target)).exit_code == 0
    assert cli("apply", "--target", str(target)).exit_code == 0
    assert statcache.load(target).tree == patched
    assert cli("verify", "--target", str(target)).exit_code == 0


# 9. a cache entry with a swapped blob makes no new target ----------------------------------------


def swap_blob(entry: Path, blob: str, content: bytes) -> None:
    """Unpack the cache entry's packs into loose objects, then give `blob`'s file other content."""
    objects = entry / "objects"
    for pack in list((objects / "pack").glob("*.pack")):
        moved = entry / pack.name
        pack.rename(moved)
        for other in (objects / "pack").glob(pack.stem + ".*"):
            other.unlink()
        with open(moved, "rb") as stream:
            subprocess.run(["git", "-C", str(entry), "unpack-objects", "-q"], stdin=stream, check=True)
        moved.unlink()
    loose = objects / blob[:2] / blob[2:]
    assert loose.exists()
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(content) + content))


@pytest.mark.parametrize("series_in_cache", [True, False])
def test_a_swapped_blob_in_the_cache_is_refused(cli, project, upstream, tmp_path, series_in_cache):
    if series_in_cache:
        applied(cli, tmp_path)  # the first new target keeps the series' commits in the cache
    else:
        assert cli("fetch").exit_code == 0
    entry = store.commit_path(upstream.commit)
    blob = git(upstream.path, "rev-parse", f"{upstream.commit}:README.md").strip()
    swap_blob(entry, blob, b"foreign content\n")
    for number in range(3):
        fresh = tmp_path / f"new{number}"
        result = cli("apply", "--target", str(fresh))
        assert result.exit_code == ExitCode.UPSTREAM_ERROR, result.output
        assert "does not match their id" in result.stderr and str(entry) in result.stderr
        assert len(result.stderr.strip().splitlines()) <= 2  # one line, and its hint
        assert not fresh.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".new{number}.")]


# 10. symlinks judged where they resolve ------------------------------------------------------------


def links_patch(links: dict[str, str]) -> bytes:
    return b"".join(new_file_patch(path, "120000", link_target) for path, link_target in links.items())


def test_symlinks_that_leave_the_tree_together_are_refused_by_lock_and_apply(cli, upstream, tmp_path):
    pin = ["--url", upstream.url, "--ref", upstream.ref, "--commit", upstream.commit]
    location = write_series(tmp_path / "links", [("links", links_patch({"b": ".", "a": "b/.."}))])
    result = cli("lock", *pin, series_dir=location.series_dir)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "'a'" in result.stderr and "outside the tree" in result.stderr
    # A lock made before this check: apply refuses all the same, creating nothing.
    location = make_series(tmp_path / "ok", upstream, patches=[("links", {"README.md": "changed\n"})])
    replace_patch(location, "0001-links.patch", links_patch({"b": ".", "a": "b/.."}))
    result = cli("apply", "--target", str(tmp_path / "t"), series_dir=location.series_dir)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "0001-links.patch" in result.stderr and "'a'" in result.stderr
    assert not (tmp_path / "t").exists()
    # Through a link upstream has (alias -> pkg), the escape completed by the second patch.
    location = write_series(tmp_path / "two", [("first", links_patch({"q": "alias/p/.."})), ("second", links_patch({"pkg/p": ".."}))])
    result = cli("lock", *pin, series_dir=location.series_dir)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "0002-second.patch" in result.stderr and "'q'" in result.stderr
    # check names the patch that completes the escape, and passes the one before it.
    location = make_series(tmp_path / "checked", upstream, patches=[("first", {"README.md": "changed\n"}), ("second", {"docs/guide.md": "x\n"})])
    replace_patch(location, "0001-first.patch", links_patch({"a": "b/.."}))
    replace_patch(location, "0002-second.patch", links_patch({"b": "."}))
    result = cli("check", "--json", series_dir=location.series_dir)
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    errors = {p["name"]: p["error"] for p in json.loads(result.stdout)["releases"]["test_v1"]["patches"]}
    assert errors["first"] is None and "'a'" in errors["second"] and "outside the tree" in errors["second"]


def test_verify_refuses_a_tree_whose_symlinks_leave_it(cli, upstream, tmp_path):
    location = make_series(tmp_path / "links", upstream, patches=[("links", {"README.md": "changed\n"})])
    replace_patch(location, "0001-links.patch", links_patch({"b": "."}))
    text = location.lock_path.read_text()
    target = tmp_path / "t"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(target)], check=True)
    git(target, "checkout", "-q", upstream.ref)
    # The tree a series adding b -> . and a -> b/.. gives, committed the way apply commits it.
    (target / "b").symlink_to(".")
    (target / "a").symlink_to("b/..")
    git(target, "add", "a", "b")
    git(target, "-c", "user.name=r", "-c", "user.email=r@x", "commit", "-q", "-m",
        "links: x\n\nRocmpatch-Patch: links\nRocmpatch-Patch-Sha256: 0\n")
    tree = git(target, "rev-parse", "HEAD^{tree}").strip()
    old_tree = text.split("patched_tree: ")[1].split()[0]
    location.lock_path.write_text(text.replace(old_tree, tree))
    replace_patch(location, "0001-links.patch", links_patch({"b": ".", "a": "b/.."}))
    result = cli("verify", "--target", str(target), series_dir=location.series_dir)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output
    assert "'a'" in result.stderr and "outside the tree" in result.stderr
