"""Stage 2, import: the patched tree's training entry modules import, and nothing NVIDIA-only loads.

The modules are the release's smoke profile's (release.yaml `smoke.imports`): `core` in every tree,
`full` too in a full checkout (one with the profile's train script). The target goes first on
sys.path; each listed module that exists in the tree is imported (a core-only tree built from the
megatron-core wheel has only megatron/core). A finder on sys.meta_path notes which file
of the target asked for an NVIDIA-only module, so a failure names the file and, through the runner,
the patch that should have changed it. Afterwards every imported megatron module must come from the
target: an installed megatron-core earlier on the path would make the check meaningless.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path
from typing import Any

from rocmpatch.smoke.child import (
    SLOW_FIRST_IMPORT, StageFailure, describe, in_target, is_nvidia_only, put_target_first, stage_main, step, target_files,
    target_root,
)
from rocmpatch.smoke.profile import SmokeProfile

def module_file(target: Path, name: str) -> Path | None:
    base = target.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def is_full_tree(target: Path, profile: SmokeProfile) -> bool:
    """A whole Megatron-LM checkout (it has the train script), not just megatron/core."""
    return (target / profile.train.script).is_file()


def entry_modules(target: Path, profile: SmokeProfile) -> tuple[list[str], list[str]]:
    """(the profile's modules this tree has, in order; those it lacks)."""
    names = list(profile.core_imports) + (list(profile.full_imports) if is_full_tree(target, profile) else [])
    present = [name for name in names if module_file(target, name) is not None]
    return present, [name for name in names if name not in present]


class NvidiaImportWatcher:
    """A meta-path finder that only watches: who in the target asked for an NVIDIA-only module."""

    def __init__(self, target: str) -> None:
        self.root = target_root(target)
        self.requested: dict[str, str] = {}  # module -> first target file that imported it

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 - finder protocol
        if "." not in name and is_nvidia_only(name) and name not in self.requested:
            self.requested[name] = self._importer() or "outside the target"
        return None  # let the real finders decide

    def _importer(self) -> str | None:
        frame = sys._getframe(1)
        while frame is not None:
            rel = in_target(frame.f_code.co_filename, self.root)
            if rel is not None:
                return rel
            frame = frame.f_back
        return None


def outside_target(target: Path) -> list[str]:
    """Imported megatron modules whose file is not in the target (shadowed by an installed package)."""
    root = target_root(target)
    wrong = []
    for name, module in list(sys.modules.items()):
        if name == "megatron" or name.startswith("megatron."):
            paths = [getattr(module, "__file__", None)] + list(getattr(module, "__path__", []) or [])
            paths = [p for p in paths if p]
            if paths and all(in_target(p, root) is None for p in paths):
                wrong.append(f"{name} from {paths[0]}")
    return wrong


def installed_megatron() -> list[str]:
    found = []
    for dist in ("megatron-core", "megatron-lm", "megatron_core"):
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return sorted(set(found))


def run(config: dict[str, Any]) -> dict[str, Any]:
    target = Path(config["target"])
    put_target_first(str(target))
    watcher = NvidiaImportWatcher(str(target))
    sys.meta_path.insert(0, watcher)

    profile = SmokeProfile.from_config(config["profile"])
    full = is_full_tree(target, profile)
    names, absent = entry_modules(target, profile)
    if not names:
        raise StageFailure(f"{target} has none of the modules the smoke profile of release {profile.release} "
                           "lists: not a Megatron-LM tree of that release?", absent=absent)
    failures: list[dict[str, Any]] = []
    for number, name in enumerate(names):
        step(f"importing {name}" + (f" ({SLOW_FIRST_IMPORT})" if number == 0 else ""))
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - report every module, not just the first
            failures.append({"module": name, "error": describe(exc),
                             "missing_module": getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
                             "culprits": target_files(exc.__traceback__, str(target))})
    shadowed = outside_target(target)
    if shadowed:
        raise StageFailure(
            f"{shadowed[0]}, not from the target: an installed package shadows the patched tree "
            f"({', '.join(installed_megatron()) or 'see pip list'}); pip uninstall megatron-core "
            "or run smoke with that environment's megatron removed", shadowed=shadowed)
    loaded = sorted({n.split(".", 1)[0] for n in sys.modules if is_nvidia_only(n)})
    result: dict[str, Any] = {"tree": "full" if full else "core-only", "modules": names, "absent": absent,
                              "failures": failures, "nvidia_only_loaded": loaded,
                              "nvidia_only_requested": watcher.requested}
    if failures:
        first = failures[0]
        missing = first["missing_module"]
        by = watcher.requested.get(missing) if missing else None
        by = by or (first["culprits"][0] if first["culprits"] else None)
        where = f" (imported by {by})" if by else ""
        more = f"; {len(failures) - 1} more module(s) failed" if len(failures) > 1 else ""
        result.update(status="failed", culprits=[by] if by else first["culprits"], missing_module=missing,
                      nvidia_only=bool(missing and is_nvidia_only(missing)),
                      detail=f"import {first['module']}: {first['error']}{where}{more}")
        return result
    if loaded:
        module = loaded[0]
        by = watcher.requested.get(module, "an unknown importer")
        result.update(status="failed", culprits=[by], missing_module=module, nvidia_only=True,
                      detail=f"NVIDIA-only module {module} was loaded, imported by {by}: the patched "
                             "tree must not use it even where it is installed")
        return result
    warn = installed_megatron()
    missing = f"; {len(absent)} listed module(s) not in this tree: {', '.join(absent[:3])}" if absent and full else ""
    result["detail"] = (f"{len(names)} modules of the {result['tree']} tree imported from the target; "
                        f"no NVIDIA-only module loaded{missing}"
                        + (f" (note: {', '.join(warn)} is installed too; the target won)" if warn else ""))
    return result


if __name__ == "__main__":
    stage_main(run)
