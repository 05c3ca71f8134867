"""From a failing file of the target to the patch of the series that changes it.

A stage child reports the target files its error went through (innermost first) and, for an
ImportError, the missing module. The hint says which patch should have fixed that file, or, for a
missing ordinary dependency, what to install.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from rocmpatch import series

# Import names whose pip package is named differently.
PIP_NAMES = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn", "cv2": "opencv-python",
             "pkg_resources": "'setuptools<81' (newer setuptools no longer ships pkg_resources)"}


class PatchIndex(dict):
    """{repository path: names of the patches that change it, in series order}; `added` keeps the
    lines each patch adds to each file, to tell which of several patches is missing from a tree."""

    def __init__(self) -> None:
        super().__init__()
        self.added: dict[tuple[str, str], list[str]] = {}


def patch_index(location: series.Location | None) -> PatchIndex:
    """The index of the series at `location`; empty when there is no usable series."""
    index = PatchIndex()
    if location is None:
        return index
    try:
        loaded = series.load(location, require_lock=False)
    except Exception:  # noqa: BLE001 - a broken series must not hide the smoke result; `check` reports it
        return index
    for patch in loaded.patches:
        for file_patch in patch.patch.files:
            for path in {file_patch.old_path, file_patch.new_path} - {None}:
                index.setdefault(path, []).append(patch.name)
                index.added.setdefault((path, patch.name), []).extend(added_lines(file_patch))
    return index


def added_lines(file_patch) -> list[str]:
    """The non-blank lines a file patch adds (new lines beyond the context it keeps), stripped."""
    added: list[str] = []
    for hunk in file_patch.hunks:
        kept = Counter(line.strip() for line in hunk.old_lines)
        for line in (line.strip() for line in hunk.new_lines):
            if kept[line] > 0:
                kept[line] -= 1
            elif line:
                added.append(line)
    return added


def not_in_tree(path: str, index: PatchIndex, target: Path | None) -> list[str]:
    """Patches changing `path` whose added lines are not all in the target's copy of it: the likely
    missing ones. Empty when that cannot be told (no target, no file, or every patch looks applied)."""
    if target is None or not (target / path).is_file():
        return []
    have = {line.strip() for line in (target / path).read_text(errors="replace").splitlines()}
    return [name for name in index.get(path, [])
            if (lines := index.added.get((path, name))) and not all(line in have for line in lines)]


def listed(requirements: Path, package: str) -> bool:
    """Whether a requirements file names `package` (one requirement a line, comments ignored)."""
    try:
        lines = requirements.read_text(errors="replace").splitlines()
    except OSError:
        return False
    names = {re.split(r"[\s<>=!~;\[]", line.split("#", 1)[0].strip(), maxsplit=1)[0].lower() for line in lines}
    return package.lower() in names


def hint(culprits: list[str], missing_module: str | None, nvidia_only: bool,
         index: dict[str, list[str]], target: Path | None = None) -> str:
    """One clause to append to a failure detail; '' when there is nothing useful to add.

    A patch that changes the failing file is the likelier fix, so it is named first; when several
    do and the target is given, the ones whose changes are absent from the file are named.
    """
    for path in culprits:
        if path in index:
            names = ", ".join(index[path])
            absent = not_in_tree(path, index, target) if isinstance(index, PatchIndex) else []
            if absent and len(absent) < len(index[path]):
                return (f"{path} is changed by patch {names}; {', '.join(absent)} "
                        f"{'is' if len(absent) == 1 else 'are'} not applied there: run rocmpatch status")
            return f"{path} is changed by patch {names}: is it applied? run rocmpatch status"
    if missing_module and not nvidia_only:
        top = missing_module.split(".", 1)[0]
        if not top.startswith("megatron") and top not in ("pretrain_gpt", "pretrain_bert", "pretrain_t5"):
            install = f"pip install {PIP_NAMES.get(top, top)}"
            requirements = target / "requirements.txt" if target is not None else None
            if requirements is not None and listed(requirements, PIP_NAMES.get(top, top)):
                install = f"install the tree's requirements: pip install -r {requirements}"
            return f"{top} is an ordinary dependency of the training path, not NVIDIA-only: {install}"
    if culprits and index:
        return f"no patch of the series changes {culprits[0]}: the series needs a fix there"
    if culprits:
        return "run rocmpatch status to see which patches are applied"
    return ""
