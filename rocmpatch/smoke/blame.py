"""From a failing file of the target to the patch of the series that changes it.

A stage child reports the target files its error went through (innermost first) and, for an
ImportError, the missing module. The hint says which patch should have fixed that file, or, for a
missing ordinary dependency, what to install.
"""

from __future__ import annotations

from rocmpatch import series

# Import names whose pip package is named differently.
PIP_NAMES = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn", "cv2": "opencv-python",
             "pkg_resources": "'setuptools<81' (newer setuptools no longer ships pkg_resources)"}


def patch_index(location: series.Location | None) -> dict[str, list[str]]:
    """{repository path: names of the patches that change it}; empty when there is no usable series."""
    if location is None:
        return {}
    try:
        loaded = series.load(location, require_lock=False)
    except Exception:  # noqa: BLE001 - a broken series must not hide the smoke result; `check` reports it
        return {}
    index: dict[str, list[str]] = {}
    for patch in loaded.patches:
        for file_patch in patch.patch.files:
            for path in {file_patch.old_path, file_patch.new_path} - {None}:
                index.setdefault(path, []).append(patch.name)
    return index


def hint(culprits: list[str], missing_module: str | None, nvidia_only: bool,
         index: dict[str, list[str]]) -> str:
    """One clause to append to a failure detail; '' when there is nothing useful to add.

    A patch that changes the failing file is the likelier fix, so it is named first.
    """
    for path in culprits:
        if path in index:
            names = ", ".join(index[path])
            return f"{path} is changed by patch {names}: is it applied? run rocmpatch status"
    if missing_module and not nvidia_only:
        top = missing_module.split(".", 1)[0]
        if not top.startswith("megatron") and top not in ("pretrain_gpt", "pretrain_bert", "pretrain_t5"):
            return (f"{top} is an ordinary dependency of the training path, not NVIDIA-only: "
                    f"pip install {PIP_NAMES.get(top, top)}")
    if culprits and index:
        return f"no patch of the series changes {culprits[0]}: the series needs a fix there"
    if culprits:
        return "run rocmpatch status to see which patches are applied"
    return ""
