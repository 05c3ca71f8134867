"""Every recipe's arguments against upstream's own parser and validate_args, in the default release's
tree built from the wheel bytes with the series applied in memory (tests/series/harness.py).

One child process imports megatron.training.arguments once (torch and Megatron's import are most of
the cost), then forks a process per case: each case starts from that freshly imported state, as a
process of its own would, with its own environment and argv, exit status and output.
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

# Reads CASES: [{"key", "argv", "env"}] (argv None: the parser's own flags instead), writes
# {key: {"returncode", "output", "flags"}} to OUT. Nothing Megatron runs before the fork but its import.
FORKED = """
import argparse, json, os, sys, traceback
from megatron.training.arguments import add_megatron_arguments, parse_args, validate_args

def validate(argv):
    sys.argv = ["pretrain_gpt.py", *argv]
    args = parse_args()
    validate_args(args)
    print("validated", args.world_size, args.tensor_model_parallel_size)

def parser_flags(path):
    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    with open(path, "w") as out:
        json.dump(sorted(parser._option_string_actions), out)

cases, results = json.loads(os.environ["CASES"]), {}
for number, case in enumerate(cases):
    log, flags = f"case{number}.log", f"case{number}.json"
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1); os.dup2(fd, 2)
            os.environ.update(case["env"])
            validate(case["argv"]) if case["argv"] is not None else parser_flags(flags)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    status = os.waitpid(pid, 0)[1]
    results[case["key"]] = {"returncode": os.waitstatus_to_exitcode(status), "output": open(log).read(),
                            "flags": json.load(open(flags)) if os.path.exists(flags) else None}
json.dump(results, open(os.environ["OUT"], "w"))
"""

PARSER = "parser flags"


def recipe_cases() -> list[dict]:
    cases = []
    for name in names():
        recipe = find(name)
        for layout in recipe.layouts:
            args = {**recipe.merged_args(layout), "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size,
                    "--mock-data": True}
            cases.append({"key": f"{name} {layout.name}", "argv": to_argv(args),
                          "env": {"WORLD_SIZE": str(layout.world_size), "RANK": "0"}})
    return cases


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory) -> Path:
    release = harness.Release(choose(harness.ROOT / "patchsets", None).release)  # where the recipes are
    return harness.Trees(tmp_path_factory).wheel(release)


@pytest.fixture(scope="module")
def upstream_runs(patched_tree, tmp_path_factory) -> dict:
    """{case key: {returncode, output, flags}}: every recipe layout, and the parser's flags (PARSER)."""
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("upstream-args")
    cases = [*recipe_cases(), {"key": PARSER, "argv": None, "env": {}}]
    env = {**os.environ, "CASES": json.dumps(cases), "OUT": str(workdir / "results.json"),
           "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": str(patched_tree)}
    done = subprocess.run([sys.executable, "-c", FORKED], env=env, cwd=workdir, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((workdir / "results.json").read_text())
    assert sorted(results) == sorted(case["key"] for case in cases)
    return results


@pytest.mark.parametrize("name", names())
def test_recipe_args_pass_upstream_validate_args(name, upstream_runs):
    recipe = find(name)
    assert recipe.layouts
    for layout in recipe.layouts:
        run = upstream_runs[f"{name} {layout.name}"]
        assert run["returncode"] == 0, f"{name} {layout.name}: {run['output'][-2000:]}"
        assert "validated" in run["output"], f"{name} {layout.name}: {run['output'][-2000:]}"


def test_the_flags_read_from_the_source_are_the_parsers_own(patched_tree, upstream_runs):
    """recipes/tree_flags reads arguments.py (add_argument calls and ArgumentGroupFactory's dataclasses)
    without running it: every flag upstream's parser accepts is found, and the only ones claimed that it
    lacks are those it adds when an optional package is installed (NVIDIA's kitchen)."""
    from rocmpatch.recipes import tree_flags

    run = upstream_runs[PARSER]
    assert run["returncode"] == 0, run["output"][-2000:]
    real = set(run["flags"]) - {"-h", "--help"}
    known = tree_flags.read(patched_tree)
    assert known.unresolved == ()
    assert real - known.flags == set()
    assert known.flags - real == {"--kitchen-config-file", "--kitchen-recipe-number"}
