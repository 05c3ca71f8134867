"""Recipe layouts through a tree's own parse_args and validate_args: one child process imports
megatron.training.arguments once (torch and Megatron's import are most of the cost), then forks a process
per case, each from that freshly imported state, with its own environment, argv, exit status and output.
Used by test_upstream_args.py (the wheel tree) and test_recipe_trains.py (each release's full tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rocmpatch.megatron_args import to_argv

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

def layout_case(key: str, recipe, args: dict, world_size: int) -> dict:
    """One case of FORKED: a recipe layout's flags, with mock data and a tokenizer of its vocabulary."""
    args = {**args, "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
    return {"key": key, "argv": to_argv(args), "env": {"WORLD_SIZE": str(world_size), "RANK": "0"}}


def run_cases(tree: Path, cases: list[dict], workdir: Path) -> dict:
    """{case key: {returncode, output, flags}}: FORKED over `cases` in `tree`'s Megatron."""
    env = {**os.environ, "CASES": json.dumps(cases), "OUT": str(workdir / "results.json"),
           "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", FORKED], env=env, cwd=workdir, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((workdir / "results.json").read_text())
    assert sorted(results) == sorted(case["key"] for case in cases)
    return results
