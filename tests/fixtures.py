"""Real git repositories and series in tmp dirs, for tests. Nothing here mocks git.

make_upstream builds a small "upstream" with history, a tag and a symlink; make_series writes a
series.yaml, patch files made by `git diff` (each header written from its entry, as `rocmpatch lock`
writes it) and an upstream.lock made by the real lock code.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from rocmpatch import gitcmd, patch_header, series
from rocmpatch.operations import locking
from rocmpatch.schema import Lock, load_lock_file, load_series

RELEASE = "test_v1"  # the release folder fixtures write: patchsets/test_v1/

MODULE_A = "".join(f"def a{i}():\n    return {i}\n\n" for i in range(20))
MODULE_B = "".join(f"def b{i}():\n    return {i}\n\n" for i in range(20))


@dataclass(frozen=True)
class Upstream:
    path: Path
    ref: str
    commit: str  # the tagged commit: the pin
    tree: str
    later: str  # a commit after the pin

    @property
    def url(self) -> str:
        return f"file://{self.path}"


def commit_all(repo_path: Path, message: str) -> str:
    repo = gitcmd.open_repo(repo_path)
    gitcmd.run(repo, "add", "-A")
    gitcmd.run(repo, "-c", "user.name=Upstream", "-c", "user.email=up@example.com", "commit", "-q", "-m", message)
    return gitcmd.head_commit(repo)


def write_files(root: Path, files: dict[str, str | bytes | None]) -> None:
    for path, content in files.items():
        full = root / path
        if content is None:
            full.unlink()
            continue
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(content.encode() if isinstance(content, str) else content)


def make_upstream(tmp: Path) -> Upstream:
    path = tmp / "upstream"
    repo = gitcmd.init_repo(path)
    write_files(path, {"README.md": "upstream\n", "pkg/__init__.py": "", "pkg/a.py": MODULE_A, "pkg/b.py": MODULE_B})
    commit_all(path, "first")
    write_files(path, {"pkg/a.py": MODULE_A + "# second\n", "docs/guide.md": "guide\n"})
    (path / "alias").symlink_to("pkg")
    pin = commit_all(path, "second")
    gitcmd.run(repo, "tag", "v1.0")
    write_files(path, {"pkg/b.py": MODULE_B + "# later\n"})
    later = commit_all(path, "after the tag")
    return Upstream(path, "v1.0", pin, gitcmd.tree_of(repo, pin), later)


def tagged_upstream(tmp: Path, files: dict[str, str | bytes | None], tag: str = "v1.0") -> Upstream:
    """An upstream of one commit holding `files`, tagged: the pin (and its own `later`)."""
    path = tmp / "upstream"
    repo = gitcmd.init_repo(path)
    write_files(path, files)
    pin = commit_all(path, "megatron")
    gitcmd.run(repo, "tag", tag)
    return Upstream(path, tag, pin, gitcmd.tree_of(repo, pin), pin)


def replace_line(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# Two patches that apply in order: the second builds on the first.
DEFAULT_PATCHES: list[tuple[str, dict[str, str | None]]] = [
    ("first-fix", {"pkg/a.py": replace_line(MODULE_A + "# second\n", "return 3\n", "return 33  # rocm\n"), "pkg/new.py": "NEW = 1\n"}),
    ("second-fix", {"pkg/a.py": replace_line(replace_line(MODULE_A + "# second\n", "return 3\n", "return 33  # rocm\n"), "return 17\n", "return 1717\n"),
                    "pkg/b.py": replace_line(MODULE_B, "return 5\n", "return 55\n")}),
]


# A framework's overlay on top of DEFAULT_PATCHES: changes a file the series changed, adds one.
OVERLAY_PATCHES: list[tuple[str, dict[str, str | None]]] = [
    ("framework-fix", {"pkg/b.py": replace_line(replace_line(MODULE_B, "return 5\n", "return 55\n"), "return 7\n", "return 77  # framework\n"),
                       "pkg/framework.py": "FRAMEWORK = 1\n"}),
]


def patch_texts(upstream: Upstream, patches: list[tuple[str, dict[str, str | None]]]) -> list[tuple[str, bytes]]:
    """Each patch as `git diff --full-index` text against the state after the ones before it."""
    repo = gitcmd.open_repo(upstream.path)
    tree, texts = upstream.tree, []
    for name, changes in patches:
        new_tree = gitcmd.write_tree(repo, tree, {p: (c.encode() if isinstance(c, str) else c) for p, c in changes.items()})
        body = gitcmd.run_bytes(repo, "diff", "--full-index", tree, new_tree)
        header = f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] {name}: test patch\n\n---\n".encode()
        texts.append((name, header + body))
        tree = new_tree
    return texts


def series_entry(name: str, file: str) -> dict:
    return {"name": name, "file": file, "summary": "test patch", "description": f"What {name} changes.\n",
            "why": "Because tests need it.\n", "author": "tests", "origin": "rocmpatch", "forwarded": "no", "last-update": "2026-11-22"}


def location_of(release_dir: Path) -> series.Location:
    """The Location of one release folder patchsets/<release>/ (its lock beside patchsets/)."""
    patchsets, release = series.find_patchsets(release_dir)
    assert release is not None, f"{release_dir} holds no series.yaml"
    return patchsets.location(release)


def lock_of(location: series.Location) -> Lock:
    """The release's entry in upstream.lock."""
    return load_lock_file(location.lock_path).releases[location.release]


def write_series(root: Path, texts: list[tuple[str, bytes]], release: str = RELEASE, *, headers: bool = False) -> series.Location:
    return location_of(write_series_dir(root / "patchsets" / release, texts, headers=headers))


def write_series_dir(directory: Path, texts: list[tuple[str, bytes]], *, headers: bool = False) -> Path:
    """series.yaml and one patch file per text in `directory` (a release's folder, or an overlay);
    with `headers`, each file's header as `rocmpatch lock` writes it from its entry."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for number, (name, text) in enumerate(texts, start=1):
        file = f"{number:04d}-{name}.patch"
        (directory / file).write_bytes(text)
        entries.append(series_entry(name, file))
    (directory / "series.yaml").write_text("# test series\n" + yaml.safe_dump({"series": entries}, sort_keys=False))
    for entry in load_series(directory).entries if headers else ():
        path = directory / entry.file
        path.write_bytes(patch_header.with_header(entry, path.read_bytes().decode()).encode())
    return directory


def make_series(root: Path, upstream: Upstream, patches=None) -> series.Location:
    """A series + lock pinned to upstream's tag, the lock written by the real `lock` code."""
    location = write_series(root, patch_texts(upstream, DEFAULT_PATCHES if patches is None else patches), headers=True)
    write_lock(location, locking.Pin(upstream.url, upstream.ref, upstream.commit))
    return location


def write_lock(location: series.Location, pin: locking.Pin = locking.Pin()) -> None:
    loaded = series.load(location, require_lock=False)
    locking.write(location, locking.compute(loaded, pin))


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def make_overlay(directory: Path, upstream: Upstream, location: series.Location, patches=None) -> Path:
    """An overlay folder (series.yaml, patch files, overlay.lock by the real lock code) on top of
    DEFAULT_PATCHES, the series `location` holds."""
    texts = patch_texts(upstream, DEFAULT_PATCHES + (OVERLAY_PATCHES if patches is None else patches))[len(DEFAULT_PATCHES):]
    write_series_dir(directory, texts, headers=True)
    write_overlay_lock(directory, location)
    return directory


def write_overlay_lock(directory: Path, location: series.Location) -> None:
    loaded = series.load(location, overlay=series.load_overlay(directory))
    locking.write_overlay(loaded.overlay, locking.compute_overlay(loaded))
