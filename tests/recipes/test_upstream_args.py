"""Every recipe's arguments against upstream's own parser and validate_args, in the default release's
tree built from the wheel bytes with the series applied in memory (tests/series/harness.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes.catalog import find, names
from rocmpatch.releases import choose
from tests.series import harness

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
    release = harness.Release(choose(harness.ROOT / "patchsets", None).release)  # where the recipes are
    return harness.Trees(tmp_path_factory).wheel(release)


@pytest.mark.parametrize("name", names())
def test_recipe_args_pass_upstream_validate_args(name, patched_tree):
    pytest.importorskip("torch")
    recipe = find(name)
    for layout in recipe.layouts:
        args = {**recipe.merged_args(layout), "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
        env = {**os.environ, "RECIPE_ARGV": json.dumps(to_argv(args)), "WORLD_SIZE": str(layout.world_size), "RANK": "0",
               "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": str(patched_tree)}
        done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name} {layout.name}: {done.stderr[-2000:]}"


PARSER_FLAGS = """
import argparse, json
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
print(json.dumps(sorted(parser._option_string_actions)))
"""


def test_the_flags_read_from_the_source_are_the_parsers_own(patched_tree):
    """recipes/tree_flags reads arguments.py (add_argument calls and ArgumentGroupFactory's dataclasses)
    without running it: every flag upstream's parser accepts is found, and the only ones claimed that it
    lacks are those it adds when an optional package is installed (NVIDIA's kitchen)."""
    pytest.importorskip("torch")
    from rocmpatch.recipes import tree_flags

    env = {**os.environ, "PYTHONPATH": str(patched_tree), "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    done = subprocess.run([sys.executable, "-c", PARSER_FLAGS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    real = set(json.loads(done.stdout.splitlines()[-1])) - {"-h", "--help"}
    known = tree_flags.read(patched_tree)
    assert known.unresolved == ()
    assert real - known.flags == set()
    assert known.flags - real == {"--kitchen-config-file", "--kitchen-recipe-number"}
