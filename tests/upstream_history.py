"""A throwaway upstream with a known history, for drift and rebase tests.

    root ── m1 ── m2 ── m3(merge of side: breaks "alpha") ── m4(renames old/mod.py: "mod")
      │                                                       ── m5(absorbs "gamma") ── m6(breaks "beta") ── m7(reverts m6) = main
      └── r1 (release branch) = tag v1.0 (the pin; not an ancestor of main)

The series against the pin: alpha (a.py), mod (old/mod.py), gamma (c.py), beta (b.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import gitcmd, series
from rocmpatch.operations import locking
from rocmpatch.patching import parse_patch
from tests.fixtures import RELEASE, write_series

def lines(prefix: str, count: int = 20) -> str:
    return "".join(f"{prefix} line {n}\n" for n in range(1, count + 1))


def replace_line(text: str, number: int, new: str) -> str:
    rows = text.splitlines(keepends=True)
    rows[number - 1] = new + "\n"
    return "".join(rows)


@dataclass
class History:
    repo: Path  # the upstream (a normal repository with a work tree)
    pin: str
    commits: dict[str, str] = field(default_factory=dict)  # label -> commit id
    project: Path | None = None  # a project dir with patchsets/ and upstream.lock
    patch_texts: dict[str, str] = field(default_factory=dict)

    @property
    def series_dir(self) -> Path:
        assert self.project is not None
        return self.project / "patchsets" / RELEASE


def git(repo: Path, *args: str) -> str:
    return gitcmd.run(repo, *args)


def commit_files(repo: Path, message: str, files: dict[str, str | None]) -> str:
    for path, text in files.items():
        target = repo / path
        if text is None:
            git(repo, "rm", "-q", path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for key, value in (("user.name", "Up Stream"), ("user.email", "up@example.com"), ("commit.gpgsign", "false")):
        git(path, "config", key, value)
    return path


BASE_FILES = {
    "a.py": lines("a"),
    "b.py": lines("b"),
    "c.py": lines("c"),
    "old/mod.py": lines("mod"),
    "README": "upstream\n",
}

# name -> (file, line number, new line): each patch changes one line of one file.
PATCHES = {
    "alpha": ("a.py", 5, "a line 5 patched for rocm"),
    "mod": ("old/mod.py", 10, "mod line 10 patched for rocm"),
    "gamma": ("c.py", 3, "c line 3 patched for rocm"),
    "beta": ("b.py", 12, "b line 12 patched for rocm"),
}


def make_history(tmp: Path) -> History:
    repo = init(tmp / "upstream")
    history = History(repo, pin="")
    c = history.commits
    c["root"] = commit_files(repo, "root", dict(BASE_FILES))
    # The release branch: the pin is a tag there, as core_v0.5.0 is.
    git(repo, "checkout", "-q", "-b", "release")
    c["r1"] = commit_files(repo, "release: bump version", {"VERSION": "1.0\n"})
    git(repo, "tag", "v1.0")
    history.pin = c["r1"]
    history.patch_texts = format_patches(repo, c["r1"])
    git(repo, "checkout", "-q", "main")
    c["m1"] = commit_files(repo, "docs: readme", {"README": "upstream, more\n"})
    c["m2"] = commit_files(repo, "a: append at the end", {"a.py": BASE_FILES["a.py"] + "a line 21\n"})
    git(repo, "checkout", "-q", "-b", "side")
    text = replace_line(BASE_FILES["a.py"] + "a line 21\n", 6, "a line 6 changed upstream")
    c["side"] = commit_files(repo, "a: change line 6", {"a.py": text})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'side'", "side")
    c["m3"] = git(repo, "rev-parse", "HEAD")
    (repo / "new").mkdir()
    git(repo, "mv", "old/mod.py", "new/mod.py")
    git(repo, "commit", "-q", "-m", "move old/mod.py to new/")
    c["m4"] = git(repo, "rev-parse", "HEAD")
    c["m5"] = commit_files(repo, "c: take the rocm fix", {"c.py": replace_line(BASE_FILES["c.py"], 3, PATCHES["gamma"][2])})
    c["m6"] = commit_files(repo, "b: reword line 11", {"b.py": replace_line(BASE_FILES["b.py"], 11, "b line 11 reworded")})
    c["m7"] = commit_files(repo, "Revert b: reword line 11", {"b.py": BASE_FILES["b.py"]})
    return history


def format_patches(repo: Path, pin: str) -> dict[str, str]:
    """Each patch as `git format-patch` writes it, made in order on top of the pin."""
    git(repo, "checkout", "-q", "-b", "rocm-series", pin)
    texts = {}
    for name, (path, number, new) in PATCHES.items():
        text = (repo / path).read_text()
        commit_files(repo, f"{name}: patch {path}\n\nWhy: ROCm.", {path: replace_line(text, number, new)})
        texts[name] = gitcmd.format_patch(repo, "HEAD")
    git(repo, "checkout", "-q", "release")
    git(repo, "branch", "-q", "-D", "rocm-series")
    return texts


def write_project(history: History, project: Path, url: str) -> Path:
    """patchsets/ (series.yaml + patch files, each header written from its entry as `rocmpatch lock`
    writes it) and upstream.lock pinned to the tag, by the real lock code."""
    location = write_series(project, [(name, text.encode()) for name, text in history.patch_texts.items()], headers=True)
    loaded = series.load(location, require_lock=False)
    lock = locking.compute(loaded, locking.Pin(url, "v1.0", history.pin), url_override=str(history.repo))
    locking.write(location, lock)
    history.project = project
    return project


def parsed_patches(history: History):
    return [parse_patch(t, name=n, source=n) for n, t in history.patch_texts.items()]
