"""The recipe file, declared once with rocmpatch.yamlio's readers: every key typed and bounded, so a
bad file is one line naming the file, the line, the key and the fix (exit 3) before anything runs.

    name: llama3-8b
    releases: [core_v0.19.0]        # names and ranges (recipes/fit.py); `release: NAME` is the old spelling
    summary: one line
    vocab_size: 128256
    args: {--flag: value, ...}      # Megatron flags: a string, a number, true (a switch) or false/null (not given)
    layouts:
    - {name, nodes, gpus_per_node, sized_for, gpu_memory_gb, tokens_per_second (optional), args}

The flags rocmpatch itself computes with (sizes, parallel layout, batch, schedule) must be integers
within INTEGER_FLAGS' bounds: a huge or non-integer value is refused here, not met later in an
estimate or a list of that many layers.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from rocmpatch import yamlio as y
from rocmpatch.errors import UsageError
from rocmpatch.recipes.fit import ReleaseSpan

_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_MAX_DIGITS = 18

# flag -> (minimum, maximum): the flags catalog.py and memory.py compute with. The maxima are far
# above any real model, and keep the arithmetic (and a list of --num-layers entries) small.
_SIZE, _COUNT, _PARALLEL = (1, 1 << 24), (1, 10**12), (1, 1 << 16)
INTEGER_FLAGS: dict[str, tuple[int, int]] = {
    "--num-layers": (1, 10_000), "--mtp-num-layers": (0, 1_000), "--num-layers-per-virtual-pipeline-stage": (1, 10_000),
    "--recompute-num-layers": (1, 10_000),
    **dict.fromkeys(("--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups", "--kv-channels",
                     "--seq-length", "--max-position-embeddings", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                     "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
                     "--micro-batch-size", "--global-batch-size", "--vocab-size", "--make-vocab-size-divisible-by"), _SIZE),
    **dict.fromkeys(("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                     "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--num-experts", "--moe-router-topk"), _PARALLEL),
    **dict.fromkeys(("--train-iters", "--eval-interval", "--log-interval", "--save-interval"), _COUNT),
    **dict.fromkeys(("--lr-warmup-iters", "--eval-iters"), (0, 10**12)),
}


def integer_problem(flag: str, value: Any) -> str | None:
    """What is wrong with `value` for one of INTEGER_FLAGS (None when it is fine or not such a flag);
    `value` is a YAML-typed value or a string from the command line."""
    bounds = INTEGER_FLAGS.get(flag)
    if bounds is None or value is None or value is False:
        return None
    low, high = bounds
    expected = f"{flag} takes an integer from {low} to {high}"
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, bool) or isinstance(value, float) or not re.fullmatch(r"[+-]?[0-9]+", text):
        return f"{expected}, got {text if len(text) <= 40 else text[:20] + '...'!r}"
    if len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS or not low <= int(text) <= high:
        shown = text if len(text) <= 40 else f"a number of {len(text)} digits"
        return f"{expected}, got {shown}"
    return None


def typed_command_line_args(args: dict) -> dict:
    """Flags given after `--` (strings): INTEGER_FLAGS' values as ints, UsageError for a bad one."""
    typed = dict(args)
    for flag, value in args.items():
        problem = integer_problem(flag, value)
        if problem:
            raise UsageError(f"after --: {problem}", hint="give a whole number in that range")
        if flag in INTEGER_FLAGS and isinstance(value, str):
            typed[flag] = int(value)
    return typed


class _Number(y.Reader):
    """A finite number (integer or decimal) within bounds -> float."""

    def __init__(self, description: str, *, minimum: float, maximum: float) -> None:
        self.description, self.minimum, self.maximum = description, minimum, maximum

    def read(self, node: y.Node) -> float:
        expected = f"a number above {self.minimum:g} and at most {self.maximum:g}"
        if isinstance(node.value, (list, dict)):
            raise node.error(f"expected {expected}, got a {'list' if node.tag == 'seq' else 'mapping'}", hint=self.description)
        if node.tag not in ("int", "float") or len(node.value) > 40:
            raise node.error(f"expected {expected}, got {node.value[:40]!r}", hint=self.description)
        try:
            value = float(node.value.replace("_", ""))
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and self.minimum < value <= self.maximum):
            raise node.error(f"{node.value} is out of range: expected {expected}", hint=self.description)
        return value


class _MegatronArgs(y.Reader):
    """{--flag: value}: a value is a string, a number, true or false/null; INTEGER_FLAGS are bounded integers."""

    description = "a mapping of Megatron flags (--name) to values"

    def read(self, node: y.Node) -> dict:
        if not isinstance(node.value, dict):
            raise node.error(f"expected {self.description}")
        args: dict = {}
        for flag, child in node.value.items():
            if not _FLAG.fullmatch(flag):
                raise node.error(f"{flag!r} is not a flag", hint="write Megatron's flags as --name", key=flag)
            if isinstance(child.value, (list, dict)):
                raise child.error(f"expected a string, a number or true/false, got a {'list' if child.tag == 'seq' else 'mapping'}",
                                  hint="several values go in one string, as on the command line ('99,1,0')")
            args[flag] = _scalar(child)
            problem = integer_problem(flag, args[flag])
            if problem:
                raise child.error(problem, hint="give a whole number in that range")
            if flag in INTEGER_FLAGS and isinstance(args[flag], str):
                args[flag] = int(args[flag])
        return args


def _scalar(node: y.Node) -> Any:
    if node.tag == "null":
        return None
    if node.tag == "bool":
        return node.value.lower() in ("true", "yes", "on")
    if node.tag == "int" and re.fullmatch(r"[+-]?[0-9_]+", node.value) and len(node.value) <= 40:
        return int(node.value.replace("_", ""))
    if node.tag == "float":
        try:
            value = float(node.value.replace("_", ""))
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise node.error(f"expected a finite number, got {node.value!r}")
        return value
    return node.value  # a string (or a number written in a form kept as text: 0x10, a 41-digit integer)


class _Releases(y.Reader):
    description = "a release name (core_v0.19.0), a range (core_v0.16.1..core_v0.19.0) or a list of them"

    def read(self, node: y.Node) -> ReleaseSpan:
        items = node.value if isinstance(node.value, list) else [node]
        for item in items:
            if isinstance(item.value, (list, dict)) or item.is_null:
                raise item.error(f"expected {self.description}")
        try:
            return ReleaseSpan.parse([item.value for item in items], y.where(node.path, node.line, node.key))
        except ValueError as error:
            raise node.error(str(error), hint=self.description) from None


ARGS = _MegatronArgs()
LAYOUT = y.Mapping({
    "name": y.Line("the layout's name, such as 8gpu"),
    "nodes": y.Integer("the number of nodes", minimum=1, maximum=4096),
    "gpus_per_node": y.Integer("GPUs (processes) per node", minimum=1, maximum=64),
    "sized_for": y.Line("the GPUs it is sized for"),
    "gpu_memory_gb": _Number("each GPU's memory in GB", minimum=0, maximum=100_000),
    "tokens_per_second": y.Optional(_Number("measured tokens per second per GPU, or null", minimum=0, maximum=1e12)),
    "args": ARGS,
})
_RECIPE_FIELDS = {
    "name": y.Line("the recipe's name"),
    "releases": y.Optional(_Releases()),
    "release": y.Optional(_Releases()),  # the spelling before lists and ranges
    "summary": y.Line("one line saying what model this is"),
    "vocab_size": y.Integer("the tokenizer's vocabulary size", minimum=1, maximum=1 << 24),
    "args": ARGS,
    "layouts": y.ListOf(LAYOUT, "a non-empty list of layouts", non_empty=True),
}
RECIPE = y.Mapping(_RECIPE_FIELDS)


def read_recipe(path: Path) -> y.Record:
    """The recipe file as a Record (releases: a ReleaseSpan; layouts: Records with `.node`)."""
    record = y.load(path, RECIPE)
    given = [key for key in ("releases", "release") if record[key] is not None]
    if len(given) != 1:
        problem = "give releases: or the older release:, not both" if given else "missing; expected the releases it fits"
        raise record.node.error(problem, hint="releases: [core_v0.19.0] (or a range, core_v0.16.1..core_v0.19.0)", key="releases")
    record["releases"] = record.pop(given[0])
    return record
