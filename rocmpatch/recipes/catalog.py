"""Load and check the recipe files (rocmpatch/recipes/*.yaml) and turn a layout into Megatron arguments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from rocmpatch.errors import InvalidInput, UsageError
from rocmpatch.recipes.memory import Estimate, estimate

DIRECTORY = Path(__file__).resolve().parent
TOP_KEYS = {"name", "release", "summary", "vocab_size", "args", "layouts"}
LAYOUT_KEYS = {"name", "nodes", "gpus_per_node", "sized_for", "gpu_memory_gb", "tokens_per_second", "args"}


@dataclass(frozen=True)
class Layout:
    name: str
    nodes: int
    gpus_per_node: int
    sized_for: str
    gpu_memory_gb: float
    tokens_per_second: float | None
    args: dict

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Recipe:
    name: str
    release: str
    summary: str
    vocab_size: int
    args: dict
    layouts: tuple[Layout, ...]
    path: Path

    def merged_args(self, layout: Layout) -> dict:
        return {**self.args, **layout.args}

    def estimate(self, layout: Layout) -> Estimate:
        return estimate(self.merged_args(layout), self.vocab_size, layout.world_size)

    def layout_for(self, gpus: int, nodes: int) -> Layout:
        for layout in self.layouts:
            if layout.gpus_per_node == gpus and layout.nodes == nodes:
                return layout
        have = ", ".join(f"{l.name} (--gpus {l.gpus_per_node} --nodes {l.nodes})" for l in self.layouts)
        raise UsageError(f"recipe {self.name} has no layout for {gpus} GPU(s) x {nodes} node(s)", hint=f"its layouts: {have}")


def to_argv(args: dict) -> list[str]:
    """{'--bf16': True, '--lr': 3e-4, '--x': False} -> ['--bf16', '--lr', '0.0003']."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return argv


def _check_args(where: str, args) -> dict:
    if not isinstance(args, dict):
        raise InvalidInput(where, "must be a mapping of Megatron flags to values")
    for flag, value in args.items():
        if not isinstance(flag, str) or not flag.startswith("--"):
            raise InvalidInput(where, f"{flag!r} is not a flag (write it as --name)")
        if isinstance(value, (dict, list)):
            raise InvalidInput(where, f"{flag}: a value must be a string, number or true/false")
    return args


def _int(args: dict, flag: str, default: int) -> int:
    return int(args.get(flag, default))


def _check_layout(recipe_path: Path, recipe_args: dict, raw) -> Layout:
    if not isinstance(raw, dict):
        raise InvalidInput(recipe_path, "each layout must be a mapping")
    where = f"{recipe_path}: layout {raw.get('name', '?')}"
    unknown = set(raw) - LAYOUT_KEYS
    missing = LAYOUT_KEYS - set(raw) - {"tokens_per_second"}
    if unknown or missing:
        raise InvalidInput(where, f"unknown keys {sorted(unknown)}" if unknown else f"missing keys {sorted(missing)}")
    layout = Layout(str(raw["name"]), int(raw["nodes"]), int(raw["gpus_per_node"]), str(raw["sized_for"]), float(raw["gpu_memory_gb"]),
                    raw.get("tokens_per_second"), _check_args(f"{where}: args", raw["args"]))
    args = {**recipe_args, **layout.args}
    tp, pp = _int(args, "--tensor-model-parallel-size", 1), _int(args, "--pipeline-model-parallel-size", 1)
    ep = _int(args, "--expert-model-parallel-size", 1)
    world = layout.world_size
    problems = []
    if world % (tp * pp):
        problems.append(f"{world} GPUs are not a multiple of TP {tp} x PP {pp}")
    else:
        dp = world // (tp * pp)
        mbs, gbs = _int(args, "--micro-batch-size", 1), _int(args, "--global-batch-size", 1)
        if gbs % (mbs * dp):
            problems.append(f"global batch {gbs} is not a multiple of micro batch {mbs} x data parallel {dp}")
    if _int(args, "--num-layers", 1) % pp:
        problems.append(f"layers not divisible by PP {pp}")
    if _int(args, "--num-attention-heads", 1) % tp or _int(args, "--num-query-groups", tp) % tp:
        problems.append(f"attention heads / query groups not divisible by TP {tp}")
    if ep > 1 and (_int(args, "--num-experts", 0) % ep or world % (ep * tp * pp)):
        problems.append(f"experts or GPUs not divisible by EP {ep}")
    if tp > 1 and not args.get("--sequence-parallel"):
        problems.append("TP > 1 without --sequence-parallel (the memory estimate and upstream's advice assume it)")
    if problems:
        raise InvalidInput(where, "; ".join(problems))
    return layout


def load(path: Path) -> Recipe:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InvalidInput(f"{path}:{mark.line + 1}" if mark else path, "invalid YAML") from None
    if not isinstance(raw, dict):
        raise InvalidInput(path, "must be a mapping")
    unknown, missing = set(raw) - TOP_KEYS, TOP_KEYS - set(raw)
    if unknown or missing:
        raise InvalidInput(path, f"unknown keys {sorted(unknown)}" if unknown else f"missing keys {sorted(missing)}")
    args = _check_args(f"{path}: args", raw["args"])
    if not isinstance(raw["layouts"], list) or not raw["layouts"]:
        raise InvalidInput(path, "layouts must be a non-empty list")
    layouts = tuple(_check_layout(path, args, item) for item in raw["layouts"])
    return Recipe(str(raw["name"]), str(raw["release"]), str(raw["summary"]), int(raw["vocab_size"]), args, layouts, path)


def names() -> list[str]:
    return sorted(p.stem for p in DIRECTORY.glob("*.yaml"))


def find(name: str) -> Recipe:
    path = DIRECTORY / f"{name}.yaml"
    if name not in names():
        raise UsageError(f"no recipe named {name!r}", hint=f"known: {', '.join(names())}")
    return load(path)
