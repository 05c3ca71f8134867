"""Load and check the recipe files (rocmpatch/recipes/*.yaml, or any file a user copied and edited)
and turn a layout into Megatron arguments: the recipe's own layouts, a layout for more nodes derived
from its multi-node one, or a scaled-down shape for a try on CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import UsageError
from rocmpatch.megatron_args import ParallelLayout, integer
from rocmpatch.recipes.fit import ReleaseSpan
from rocmpatch.recipes.memory import Estimate, estimate, layer_pattern, moe_layer_freq
from rocmpatch.recipes.schema import read_recipe

DIRECTORY = Path(__file__).resolve().parent


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
    releases: ReleaseSpan  # the releases whose flags it is written for (recipes/fit.py)
    summary: str
    vocab_size: int
    args: dict
    layouts: tuple[Layout, ...]
    path: Path

    def merged_args(self, layout: Layout) -> dict:
        return {**self.args, **layout.args}

    def estimate(self, layout: Layout, upstream=None, device: str = "gpu") -> Estimate:
        """Memory per GPU; upstream: the release's theoretical_memory_usage module (memory.upstream_model)."""
        return estimate(self.merged_args(layout), self.vocab_size, layout.world_size, upstream=upstream, device=device)

    def layout_for(self, gpus: int, nodes: int) -> Layout:
        """The recipe's layout for gpus x nodes, else one derived from its layout with the most nodes
        for that many GPUs per node: same parallel sizes, the global batch scaled with the nodes (each
        data-parallel rank keeps its batch)."""
        for layout in self.layouts:
            if layout.gpus_per_node == gpus and layout.nodes == nodes:
                return layout
        same_node = [l for l in self.layouts if l.gpus_per_node == gpus]
        if not same_node:
            have = ", ".join(f"{l.name} (--gpus-per-node {l.gpus_per_node} --nodes {l.nodes})" for l in self.layouts)
            raise UsageError(f"recipe {self.name} has no layout for {gpus} GPU(s) per node", hint=f"its layouts: {have}")
        base = max(same_node, key=lambda l: l.nodes)
        args = dict(base.args)
        batch = integer(self.merged_args(base), "--global-batch-size", 1) * nodes
        if batch % base.nodes:
            raise UsageError(f"recipe {self.name}: layout {base.name}'s global batch does not scale to {nodes} node(s)",
                             hint=f"use a multiple of {base.nodes} nodes, or add a layout for {nodes} node(s) to a copy of {self.path}")
        args["--global-batch-size"] = batch // base.nodes
        layout = Layout(f"{nodes}node", nodes, gpus, f"{nodes} nodes, derived from {base.name}", base.gpu_memory_gb, None, args)
        problems = layout_problems(self.merged_args(layout), layout.world_size)
        if problems:
            raise UsageError(f"recipe {self.name}: layout {base.name} scaled to {nodes} node(s): {'; '.join(problems)}",
                             hint=f"add a layout for {nodes} node(s) to a copy of {self.path}")
        return layout

    def cpu_args(self, processes: int) -> dict:
        """The recipe's flags at a size a CPU trains in a minute, for `recipe launch --device cpu`:
        its architecture switches (RoPE, RMSNorm, SwiGLU, GQA, MoE routing, precision, optimizer) kept,
        its sizes, parallel layout and schedule replaced by CPU_SHAPE, over gloo."""
        args = {flag: value for flag, value in self.args.items() if flag not in CPU_DROPPED}
        shape = {**CPU_SHAPE, **cpu_sizes(args)}
        if "--num-query-groups" not in args:
            shape.pop("--num-query-groups")
        if "--ffn-hidden-size" not in args:
            shape.pop("--ffn-hidden-size")
        shape["--global-batch-size"] = shape["--micro-batch-size"] * processes * 2
        return {**args, **shape}


# What `--device cpu` replaces: the sizes, the parallel layout and the schedule of a GPU run.
CPU_DROPPED = frozenset((
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--expert-model-parallel-size",
    "--context-parallel-size", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
))
CPU_SHAPE = {
    "--distributed-backend": "gloo",
    "--num-layers": 2, "--hidden-size": 64, "--ffn-hidden-size": 128, "--num-attention-heads": 4,
    "--num-query-groups": 2, "--seq-length": 64, "--max-position-embeddings": 64,
    "--micro-batch-size": 2, "--global-batch-size": 8,
    "--train-iters": 10, "--lr-warmup-iters": 2, "--eval-interval": 10, "--eval-iters": 2, "--log-interval": 1,
}


# The sizes of MoE and multi-latent attention a CPU run replaces, where a recipe sets them.
CPU_SIZES = {"--moe-ffn-hidden-size": 32, "--moe-shared-expert-intermediate-size": 32, "--kv-channels": 16,
             "--q-lora-rank": 32, "--kv-lora-rank": 16, "--qk-head-dim": 16, "--qk-pos-emb-head-dim": 8, "--v-head-dim": 16}


def cpu_sizes(args: dict, layers: int = 2) -> dict:
    """What a recipe's MoE and MLA sizes become in a CPU run of `layers` layers: at most 4 experts
    (top-k at most 2), the layer pattern's first layer kept (DeepSeek's dense one) and MoE after
    it, small latent ranks and heads."""
    sizes = {flag: value for flag, value in CPU_SIZES.items() if flag in args}
    if "--num-experts" in args:
        sizes["--num-experts"] = min(4, integer(args, "--num-experts", 4))
        sizes["--moe-router-topk"] = min(2, integer(args, "--moe-router-topk", 2))
        if "--moe-layer-freq" in args:  # the recipe's first layer (layer 0 is MoE for a frequency N)
            freq = moe_layer_freq(args["--moe-layer-freq"], None)
            first = freq[0] if isinstance(freq, list) else 1
            sizes["--moe-layer-freq"] = str([first] + [1] * (layers - 1)).replace(" ", "")
    return sizes


def layout_problems(args: dict, world: int, *, for_estimate: bool = True) -> list[str]:
    """What makes Megatron refuse these args on `world` GPUs (and, `for_estimate`, what makes the
    memory estimate meaningless)."""
    layout = ParallelLayout.of(args, world)
    problems = layout.problems(args)
    layers = integer(args, "--num-layers", 1)
    try:
        layer_pattern(moe_layer_freq(args.get("--moe-layer-freq", 1), layers), layers)
    except ValueError as exc:
        problems.append(str(exc))
    if for_estimate and layout.tp > 1 and not args.get("--sequence-parallel"):
        problems.append("TP > 1 without --sequence-parallel (the memory estimate and upstream's advice assume it)")
    return problems


def load(path: Path) -> Recipe:
    """A recipe file, checked whole before it is used: InvalidInput naming the file, the line, the
    key and the fix (rocmpatch.recipes.schema)."""
    raw = read_recipe(path)
    layouts = []
    for item in raw["layouts"]:
        layout = Layout(item["name"], item["nodes"], item["gpus_per_node"], item["sized_for"], item["gpu_memory_gb"],
                        item["tokens_per_second"], item["args"])
        problems = layout_problems({**raw["args"], **layout.args}, layout.world_size)
        if problems:
            raise item.node.error(f"layout {layout.name}: {'; '.join(problems)}",
                                  hint=f"change its args (or the recipe's) so that Megatron takes them on its {layout.world_size} GPU(s)")
        layouts.append(layout)
    return Recipe(raw["name"], raw["releases"], raw["summary"], raw["vocab_size"], raw["args"], tuple(layouts), path)


def names() -> list[str]:
    return sorted(p.stem for p in DIRECTORY.glob("*.yaml"))


def find(name: str) -> Recipe:
    """A recipe by name (rocmpatch/recipes/NAME.yaml) or by the path of a recipe file (a copy a user edited)."""
    if name in names():
        return load(DIRECTORY / f"{name}.yaml")
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") or "/" in name:
        if not path.is_file():
            raise UsageError(f"no recipe file {name}", hint=f"give a recipe name ({', '.join(names())}) or the path of a recipe .yaml file")
        return load(path)
    raise UsageError(f"no recipe named {name!r}", hint=f"known: {', '.join(names())}; or give the path of a recipe .yaml file")
