"""Every recipe's arguments against upstream's own parser and validate_args, and a tiny-scaled training
run, in the core_v0.19.0 tree built from the wheel bytes with the series applied.

Skipped until the core_v0.19.0 series lands in patchsets/core_v0.19.0/ (the lead wires it then).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rocmpatch.recipes.catalog import find, names, to_argv

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "patchsets" / "core_v0.19.0"
pytestmark = pytest.mark.skipif(not (SERIES / "series.yaml").is_file(),
                                reason="needs the core_v0.19.0 series in patchsets/core_v0.19.0/ (not landed yet)")

CHECK = """
import json, os, sys
from megatron.training.arguments import parse_args, validate_args
sys.argv = ["pretrain_gpt.py", *json.loads(os.environ["RECIPE_ARGV"])]
args = parse_args()
validate_args(args)
print("validated", args.world_size, args.tensor_model_parallel_size)
"""


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory) -> Path:
    from tests.megatron_wheel import megatron_core_files

    tree = tmp_path_factory.mktemp("core_v0.19.0")
    for path, data in megatron_core_files("core_v0.19.0").items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    series = yaml.safe_load((SERIES / "series.yaml").read_text())
    for entry in series.get("patches", []):
        patch = SERIES / (entry["file"] if isinstance(entry, dict) else entry)
        # patches touching files the wheel lacks (pretrain_gpt.py, tools/) are left to the full-tree tests
        subprocess.run(["git", "-C", str(tree), "apply", "--include=megatron/*", str(patch)], check=True)
    return tree


@pytest.mark.parametrize("name", names())
def test_recipe_args_pass_upstream_validate_args(name, patched_tree):
    recipe = find(name)
    for layout in recipe.layouts:
        args = {**recipe.merged_args(layout), "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
        env = {**os.environ, "RECIPE_ARGV": json.dumps(to_argv(args)), "WORLD_SIZE": str(layout.world_size), "RANK": "0",
               "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": str(patched_tree)}
        done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} {layout.name}: {done.stderr[-2000:]}"


def test_tiny_scaled_recipe_trains(patched_tree):
    pytest.skip("the lead wires the tiny-scaled training run (pretrain_gpt.py, gloo, 2 layers, hidden 64) once the series lands")
