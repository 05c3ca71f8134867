"""A release's smoke profile: what the import stage imports, which op checks run, how train trains.

It is the `smoke:` section of patchsets/<release>/release.yaml, beside the series, because the tree
layout differs between releases (the oldest have megatron/model, megatron/arguments.py and the legacy
model path; newer trees have megatron/training/ and megatron.core models only). What every release
shares stays in code: the tiny model's size, the data and tokenizer flags, the backend, precision and
parallelism (train.py), and how op checks compute and compare (op_checks.py, ops.py).

    smoke:
      imports:
        core: [megatron.core, ...]         # imported wherever they exist (a core-only tree too)
        full: [megatron.training, ...]     # also imported in a full tree (one with the train script)
      ops:                                 # names from op_checks.REGISTRY, or entries of op_checks.KINDS:
      - core-softmax
      - name: legacy-softmax               #   a check of a module only this release's tree has
        kind: softmax
        module: megatron.model.fused_softmax
        enums: megatron.model.enums        #   (kind-specific keys: op_checks.Kind)
        label: legacy                      #   optional: the checks' names start with it
        path: megatron/model/fused_softmax.py   # optional: the module's file (this is the default)
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
skips import, ops and train, saying so. The schema is declared with rocmpatch.yamlio's readers, so
an error names the file, the line and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmpatch import yamlio as y
from rocmpatch.schema import RELEASE_FILE, ReleaseInfo, load_release_info
from rocmpatch.smoke.train_args import owned_flags

PROFILED_STAGES = ("import", "ops", "train")
DEFAULT_SCRIPT = "pretrain_gpt.py"

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_RUN_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_SCRIPT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.py")

_FLAGS = y.Optional(y.Strings("command-line argument"), ())
_RUN = y.Mapping({"name": y.String("a short lowercase name such as 'mcore'", pattern=_RUN_NAME, what="run name"),
                  "args": _FLAGS})
_TRAIN = y.Mapping({
    "script": y.Optional(y.String("a .py file relative to the top of the tree", pattern=_SCRIPT), DEFAULT_SCRIPT),
    "args": _FLAGS, "cpu-args": _FLAGS, "gpu-args": _FLAGS,
    "runs": y.ListOf(_RUN, "a non-empty list of runs, each {name, args}", non_empty=True),
})
_IMPORTS = y.Mapping({
    "core": y.Strings("dotted module name", pattern=_MODULE, non_empty=True, unique=True),
    "full": y.Optional(y.Strings("dotted module name", pattern=_MODULE, unique=True), ()),
})
_SMOKE = y.Mapping({
    "imports": _IMPORTS,
    "ops": y.ListOf(y.Raw("an op check"), "a non-empty list of op checks: names from "
                    "rocmpatch/smoke/op_checks.py REGISTRY, or {name, kind, module, ...} entries", non_empty=True),
    "train": _TRAIN,
})
_OP = y.Mapping({
    "name": y.String("a short lowercase name such as 'legacy-softmax'", pattern=_RUN_NAME, what="op check name"),
    "kind": y.Raw("a kind of rocmpatch/smoke/op_checks.py KINDS"),
    "module": y.String("the dotted module the checks import", pattern=_MODULE, what="module name"),
    "path": y.Optional(y.String("the module's file in the tree", pattern=re.compile(r"megatron/[A-Za-z0-9_/]+\.py"))),
    "label": y.Optional(y.Line("what the checks' names start with")),
    "enums": y.Optional(y.String("the dotted module of AttnMaskType", pattern=_MODULE, what="module name")),
    "variants": y.Optional(y.Strings("variant", non_empty=True, unique=True)),
})


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
    ops: tuple[str | dict[str, Any], ...]  # REGISTRY names, and KINDS entries as plain data
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


def profile_of(info: ReleaseInfo, release: str) -> SmokeProfile | None:
    """The smoke profile of a release.yaml already read (schema.load_release_info), or None."""
    return None if info.smoke is None else parse_profile(info.smoke, release)


def no_profile_reason(release: str | None) -> str:
    """Why import, ops and train are skipped when there is no profile."""
    if release is None:
        return "no smoke profile: no release was given, so smoke does not know what to import, check or train"
    return (f"release {release} has no smoke profile (no smoke: section in patchsets/{release}/{RELEASE_FILE}), "
            "so smoke does not know what to import, check or train; see docs/smoke.md")


def load_profile(series_dir: Path) -> SmokeProfile | None:
    """The smoke profile in `series_dir`/release.yaml, or None when there is none."""
    return profile_of(load_release_info(series_dir), series_dir.name)


def parse_profile(node: y.Node, release: str) -> SmokeProfile:
    """The profile in release.yaml's `smoke:` node; checks what spans fields (op names, owned flags)."""
    smoke = _SMOKE.read(node)
    imports = smoke["imports"]
    both = set(imports["core"]) & set(imports["full"])
    if both:
        raise imports.node.error(f"{sorted(both)[0]!r} is in core too; list each module once", key="full")
    ops = tuple(_op(item) for item in smoke["ops"])
    names = [op if isinstance(op, str) else op["name"] for op in ops]
    for item, name in zip(smoke["ops"], names):
        if names.count(name) > 1:
            raise item.error(f"{name!r} is listed twice", hint="list each op check once")
    train = smoke["train"]
    script = train.node.get("script")
    if script is not None and ".." in train["script"].split("/"):
        raise script.error(f"expected a .py file relative to the top of the tree, got {script.value!r}")
    owned = owned_flags()
    for record, field in [(train, "args"), (train, "cpu-args"), (train, "gpu-args"),
                          *((run, "args") for run in train["runs"])]:
        _refuse_owned(record.node.get(field), owned)
    runs: list[TrainRun] = []
    for run in train["runs"]:
        if any(r.name == run["name"] for r in runs):
            raise run.node.error(f"duplicate run name {run['name']!r}", key="name")
        runs.append(TrainRun(run["name"], run["args"]))
    profile = TrainProfile(tuple(runs), train["script"], train["args"], train["cpu-args"], train["gpu-args"])
    return SmokeProfile(release, imports["core"], imports["full"], ops, profile)


def _op(node: y.Node) -> str | dict[str, Any]:
    """One smoke.ops item: a REGISTRY name, or an entry of a KINDS kind (as plain data, for the child)."""
    from rocmpatch.smoke.op_checks import KINDS, REGISTRY

    known = f"op checks: {', '.join(REGISTRY)}; or an entry {{name, kind, module, ...}} of a kind: {', '.join(KINDS)}"
    if not isinstance(node.value, dict):
        if isinstance(node.value, str) and node.value in REGISTRY:
            return node.value
        raise node.error(f"unknown op check {node.plain()!r}", hint=known)
    entry = _OP.read(node)
    kind = KINDS.get(entry["kind"].value) if isinstance(entry["kind"].value, str) else None
    if kind is None:
        raise entry["kind"].error(f"unknown kind {entry['kind'].plain()!r}", hint=known)
    if entry["name"] in REGISTRY:
        raise entry.node.error(f"{entry['name']!r} is a REGISTRY check already", hint="name the entry otherwise", key="name")
    if kind.enums != (entry["enums"] is not None):
        raise entry.node.error(f"kind {entry['kind'].value} {'needs' if kind.enums else 'takes no'} enums:",
                               hint=kind.description, key="enums")
    if bool(kind.variants) != (entry["variants"] is not None):
        raise entry.node.error(f"kind {entry['kind'].value} {'needs' if kind.variants else 'takes no'} variants:",
                               hint=f"{kind.description}; variants: {', '.join(kind.variants)}" if kind.variants else kind.description,
                               key="variants")
    for index, variant in enumerate(entry["variants"] or ()):
        if variant not in kind.variants:
            raise entry.node.get("variants").value[index].error(
                f"{variant!r} is not a variant of kind {entry['kind'].value}", hint=f"one of {', '.join(kind.variants)}")
    plain = {"name": entry["name"], "kind": entry["kind"].value, "module": entry["module"]}
    plain.update({key: entry[key] for key in ("path", "label", "enums") if entry[key] is not None})
    if entry["variants"] is not None:
        plain["variants"] = list(entry["variants"])
    return plain


def _refuse_owned(flags: y.Node | None, owned: frozenset[str]) -> None:
    """A flag smoke sets itself for every release has no place in a profile."""
    for item in flags.value if flags is not None and isinstance(flags.value, list) else []:
        flag = item.value.split("=", 1)[0]
        if flag in owned:
            raise item.error(f"{flag} is set by smoke itself for every release (rocmpatch/smoke/train.py)",
                             hint="leave it out of the profile")
