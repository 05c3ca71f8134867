"""Every recipe's arguments against upstream's own parser and validate_args, in the default release's
tree built from the wheel bytes with the series applied in memory (testkit/harness.py).

One child process imports megatron.training.arguments once, then forks a process per case
(tests/recipes/upstream_args.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmpatch.recipes.catalog import find, names
from rocmpatch.releases import choose
from tests.recipes.upstream_args import layout_case, run_cases
from testkit import harness

PARSER = "parser flags"


def recipe_cases() -> list[dict]:
    return [layout_case(f"{name} {layout.name}", find(name), find(name).merged_args(layout), layout.world_size)
            for name in names() for layout in find(name).layouts]


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory) -> Path:
    release = harness.Release(choose(harness.ROOT / "patchsets", None).release)  # where the recipes are
    return harness.Trees(tmp_path_factory).wheel(release)


@pytest.fixture(scope="module")
def upstream_runs(patched_tree, tmp_path_factory) -> dict:
    """{case key: {returncode, output, flags}}: every recipe layout, and the parser's flags (PARSER)."""
    pytest.importorskip("torch")
    cases = [*recipe_cases(), {"key": PARSER, "argv": None, "env": {}}]
    return run_cases(patched_tree, cases, tmp_path_factory.mktemp("upstream-args"))


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
