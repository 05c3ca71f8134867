"""A release's smoke profile: what the import stage imports, which op checks run, how train trains.

It is the `smoke:` section of patchsets/<release>/release.yaml, beside the series, because the tree
layout differs between releases (core_v0.5.0 has megatron/model, megatron/arguments.py and the legacy
model path; newer trees have megatron/training/ and megatron.core models only). What every release
shares stays in code: the tiny model's size, the data and tokenizer flags, the backend, precision and
parallelism (train.py), and how op checks compute and compare (op_checks.py, ops.py).

    smoke:
      imports:
        core: [megatron.core, ...]         # imported wherever they exist (a core-only tree too)
        full: [megatron.training, ...]     # also imported in a full tree (one with the train script)
      ops: [core-softmax, rope, ...]       # names from op_checks.REGISTRY
      train:
        script: pretrain_gpt.py            # optional; this is the default
        args: [...]                        # optional: every run, every platform
        cpu-args: [...]                    # optional: every run on CPU
        gpu-args: [...]                    # optional: every run on GPUs
        runs:                              # one training run each, in order
        - name: legacy
          args: []
        - name: mcore
          args: [--use-mcore-models, --transformer-impl, local]

A release without a `smoke:` section has no profile: smoke then runs environment and collectives and
skips import, ops and train, saying so. The loader validates with rocmpatch.schema's YAML reader, so
an error names the file, the line and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmpatch.errors import InvalidInput
from rocmpatch.schema import RELEASE_FILE, _load_mapping, _mapping, _Node, _where

PROFILED_STAGES = ("import", "ops", "train")
DEFAULT_SCRIPT = "pretrain_gpt.py"

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_RUN_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_SCRIPT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.py")

_SMOKE_KEYS = {"imports": "the modules the import stage imports ({core: [...], full: [...]})",
               "ops": "the op checks that apply to this release (names from rocmpatch/smoke/op_checks.py)",
               "train": "how the train stage runs the train script ({runs: [{name, args}], ...})"}
_IMPORT_KEYS = {"core": "modules imported in every tree that has them",
                "full": "modules imported too in a full tree (one with the train script)"}
_TRAIN_KEYS = {"script": f"the training script at the top of the tree (default {DEFAULT_SCRIPT})",
               "args": "flags of every run", "cpu-args": "flags of every run on CPU",
               "gpu-args": "flags of every run on GPUs", "runs": "the training runs: [{name, args}]"}
_RUN_KEYS = {"name": "a short lowercase name such as 'mcore'", "args": "the flags of this run"}


@dataclass(frozen=True)
class TrainRun:
    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainProfile:
    runs: tuple[TrainRun, ...]
    script: str = DEFAULT_SCRIPT
    args: tuple[str, ...] = ()
    cpu_args: tuple[str, ...] = ()
    gpu_args: tuple[str, ...] = ()

    def flags(self, run: TrainRun, platform: str) -> list[str]:
        """The release's flags for one run on one platform (after the flags smoke sets itself)."""
        return [*self.args, *(self.cpu_args if platform == "cpu" else self.gpu_args), *run.args]


@dataclass(frozen=True)
class SmokeProfile:
    release: str
    core_imports: tuple[str, ...]
    full_imports: tuple[str, ...]
    ops: tuple[str, ...]
    train: TrainProfile

    def to_config(self) -> dict[str, Any]:
        """Plain data for a stage child's JSON config; from_config reads it back."""
        t = self.train
        return {"release": self.release, "imports": {"core": list(self.core_imports), "full": list(self.full_imports)},
                "ops": list(self.ops),
                "train": {"script": t.script, "args": list(t.args), "cpu-args": list(t.cpu_args),
                          "gpu-args": list(t.gpu_args),
                          "runs": [{"name": r.name, "args": list(r.args)} for r in t.runs]}}

    @classmethod
    def from_config(cls, data: dict[str, Any]) -> "SmokeProfile":
        t = data["train"]
        train = TrainProfile(tuple(TrainRun(r["name"], tuple(r["args"])) for r in t["runs"]), t["script"],
                             tuple(t["args"]), tuple(t["cpu-args"]), tuple(t["gpu-args"]))
        return cls(data["release"], tuple(data["imports"]["core"]), tuple(data["imports"]["full"]),
                   tuple(data["ops"]), train)


def no_profile_reason(release: str | None) -> str:
    """Why import, ops and train are skipped when there is no profile."""
    if release is None:
        return "no smoke profile: no release was given, so smoke does not know what to import, check or train"
    return (f"release {release} has no smoke profile (no smoke: section in patchsets/{release}/{RELEASE_FILE}), "
            "so smoke does not know what to import, check or train; see docs/smoke.md")


def load_profile(series_dir: Path) -> SmokeProfile | None:
    """The smoke profile in `series_dir`/release.yaml, or None when there is none."""
    path = series_dir / RELEASE_FILE
    if not path.exists():
        return None
    root = _load_mapping(path, {"validated": "where the patched tree was shown to work", "smoke": "the smoke profile"})
    node = root.get("smoke")
    if node is None:
        return None
    return parse_profile(path, node, series_dir.name)


def parse_profile(path: Path, node: _Node, release: str) -> SmokeProfile:
    from rocmpatch.smoke.op_checks import REGISTRY

    smoke = _mapping(path, node, "smoke", _SMOKE_KEYS)
    imports = _mapping(path, _child(path, smoke, "imports", "smoke"), "smoke.imports", _IMPORT_KEYS)
    core = _names(path, imports, "core", "smoke.imports", _MODULE, "a dotted module name such as megatron.core",
                  required=True)
    full = _names(path, imports, "full", "smoke.imports", _MODULE, "a dotted module name such as megatron.training")
    both = set(core) & set(full)
    if both:
        name = sorted(both)[0]
        raise InvalidInput(_where(path, imports.line_of("full"), "smoke.imports.full"),
                           f"{name!r} is in core too; list each module once")
    ops_node = _child(path, smoke, "ops", "smoke")
    ops = _names(path, smoke, "ops", "smoke", None, "an op check name", required=True)
    for index, name in enumerate(ops):
        if name not in REGISTRY:
            raise InvalidInput(_where(path, ops_node.value[index].lineno, f"smoke.ops[{index}]"),
                               f"unknown op check {name!r}", hint=f"known op checks: {', '.join(REGISTRY)}")
    return SmokeProfile(release, core, full, ops, _train(path, _child(path, smoke, "train", "smoke")))


def _train(path: Path, node: _Node) -> TrainProfile:
    from rocmpatch.smoke.train import owned_flags

    key = "smoke.train"
    train = _mapping(path, node, key, _TRAIN_KEYS)
    script = DEFAULT_SCRIPT
    script_node = train.get("script")
    if script_node is not None:
        script = script_node.value if isinstance(script_node.value, str) else ""
        if not _SCRIPT.fullmatch(script) or ".." in script.split("/"):
            raise InvalidInput(_where(path, script_node.lineno, f"{key}.script"),
                               f"expected a .py file relative to the top of the tree, got {script_node.value!r}")
    owned = owned_flags()
    lists = {}
    for field in ("args", "cpu-args", "gpu-args"):
        lists[field] = _flags(path, train, field, key, owned)
    runs_node = _child(path, train, "runs", key)
    if not isinstance(runs_node.value, list) or not runs_node.value:
        raise InvalidInput(_where(path, runs_node.lineno, f"{key}.runs"),
                           "expected a non-empty list of runs, each {name, args}")
    runs: list[TrainRun] = []
    for index, item in enumerate(runs_node.value):
        item_key = f"{key}.runs[{index}]"
        fields = _mapping(path, item, item_key, _RUN_KEYS)
        name_node = _child(path, fields, "name", item_key)
        name = name_node.value if isinstance(name_node.value, str) else ""
        if not _RUN_NAME.fullmatch(name):
            raise InvalidInput(_where(path, name_node.lineno, f"{item_key}.name"),
                               f"{name_node.value!r} is not a valid run name", hint=_RUN_KEYS["name"])
        if any(run.name == name for run in runs):
            raise InvalidInput(_where(path, name_node.lineno, f"{item_key}.name"), f"duplicate run name {name!r}")
        runs.append(TrainRun(name, _flags(path, fields, "args", item_key, owned)))
    return TrainProfile(tuple(runs), script, lists["args"], lists["cpu-args"], lists["gpu-args"])


def _child(path: Path, node: _Node, field: str, key: str) -> _Node:
    child = node.get(field)
    if child is None:
        raise InvalidInput(_where(path, node.lineno, f"{key}.{field}"), "missing",
                           hint={**_SMOKE_KEYS, **_IMPORT_KEYS, **_TRAIN_KEYS, **_RUN_KEYS}.get(field))
    return child


def _strings(path: Path, node: _Node, field: str, key: str, what: str, required: bool) -> tuple[list[str], _Node | None]:
    child = _child(path, node, field, key) if required else node.get(field)
    if child is None or (child.value == "" and not required):  # absent, or `args:` left empty
        return [], None
    if not isinstance(child.value, list) or (required and not child.value):
        raise InvalidInput(_where(path, child.lineno, f"{key}.{field}"),
                           f"expected a {'non-empty ' if required else ''}list of {what}s")
    values = []
    for index, item in enumerate(child.value):
        if not isinstance(item.value, str) or not item.value.strip():
            raise InvalidInput(_where(path, item.lineno, f"{key}.{field}[{index}]"), f"expected {what} as a string")
        values.append(item.value)
    return values, child


def _names(path: Path, node: _Node, field: str, key: str, pattern: re.Pattern | None, what: str,
           required: bool = False) -> tuple[str, ...]:
    values, child = _strings(path, node, field, key, what, required)
    seen: set[str] = set()
    for index, value in enumerate(values):
        where = _where(path, child.value[index].lineno, f"{key}.{field}[{index}]")
        if pattern is not None and not pattern.fullmatch(value):
            raise InvalidInput(where, f"{value!r} is not {what}")
        if value in seen:
            raise InvalidInput(where, f"{value!r} is listed twice")
        seen.add(value)
    return tuple(values)


def _flags(path: Path, node: _Node, field: str, key: str, owned: frozenset[str]) -> tuple[str, ...]:
    values, child = _strings(path, node, field, key, "command-line argument", False)
    for index, value in enumerate(values):
        flag = value.split("=", 1)[0]
        if flag in owned:
            raise InvalidInput(_where(path, child.value[index].lineno, f"{key}.{field}[{index}]"),
                               f"{flag} is set by smoke itself for every release (rocmpatch/smoke/train.py)",
                               hint="leave it out of the profile")
    return tuple(values)
