"""Each recipe, scaled down, trains on each release it launches on: on a tree `rocmpatch apply` wrote
from the mirror (ROCMPATCH_TEST_UPSTREAM), `recipe launch`'s own choice of flags for that tree
(rocmpatch.recipes.fit: the recipe as written on a release its `releases:` lists, on another the flags
that tree's Megatron knows), its parallel layout, sizes and data aside, on upstream's pretrain_gpt.py,
two CPU processes over gloo. A recipe `recipe launch` refuses on a release is refused in one line.

Which releases: those the series harness runs fully (testkit/harness.py, not_run_here): the
default release without ROCMPATCH_TEST_RELEASES, the releases it names with it (or all)."""

from __future__ import annotations

import os
import sys

import pytest

from rocmpatch.errors import UsageError
from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes import fit
from rocmpatch.recipes.catalog import cpu_sizes, find, names
from testkit import harness
from tests.recipes.upstream_args import layout_case, run_cases
from testkit.flags import DEEPSEEK_BASE

pytestmark = pytest.mark.upstream

# What the tiny run decides itself: model size, parallel layout (two CPU processes), batch, data,
# tokenizer, schedule length and logging. Everything else in a recipe is kept.
SCALED_AWAY = (
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
    "--seq-length", "--max-position-embeddings", "--micro-batch-size", "--global-batch-size",
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--expert-model-parallel-size",
    "--context-parallel-size", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage",
    "--train-iters", "--lr-warmup-iters", "--lr", "--min-lr", "--eval-interval", "--eval-iters", "--log-interval",
    "--save", "--load", "--save-interval", "--data-path", "--split", "--tokenizer-type", "--tokenizer-model",
    "--vocab-size", "--mock-data", "--make-vocab-size-divisible-by",
)
ITERS = 6

def selected_releases() -> list:
    """Every release, skipped (saying where it runs) where this session does not test it fully."""
    params = []
    for release in harness.releases():
        reason = harness.not_run_here(release.name, generic=True, every_release=False)
        params.append(pytest.param(release, id=release.name, marks=[pytest.mark.skip(reason=reason)] if reason else []))
    return params


@pytest.fixture(scope="module", params=selected_releases())
def applied(request, upstream_mirror, tmp_path_factory):
    """(release, its tree written by `rocmpatch apply`): a checkout whose release `recipe launch` detects."""
    from tests.data.prepared import applied_tree

    harness.needs_training_tools()
    release = request.param
    return release, applied_tree(release.name, upstream_mirror, tmp_path_factory.mktemp("recipe-trees"))


@pytest.mark.parametrize("name", names())
def test_scaled_down_recipe_trains_where_it_launches(name, applied):
    release, tree = applied
    recipe = find(name)
    layout = recipe.layouts[0]
    args = recipe.merged_args(layout)
    try:
        fitted = fit.to_tree(recipe, tree, args, set())
    except UsageError as refused:  # what `recipe launch` prints, before torchrun starts
        assert release.name not in recipe.releases.releases(fit.release_order()), f"{name} lists {release} yet: {refused}"
        assert "\n" not in str(refused) and refused.hint and "\n" not in refused.hint, refused
        print(f"\n{release} {name}: refused: {refused}")
        return
    kept = {flag: value for flag, value in fitted.args.items() if flag not in SCALED_AWAY}
    kept.update(cpu_sizes(kept))  # MoE and MLA sizes too: at most 4 experts (a multiple of the two processes)
    if "--expert-model-parallel-size" in args:
        kept["--expert-model-parallel-size"] = 2  # the recipe's expert parallelism, over the two processes
    if kept.get("--multi-latent-attention"):  # MLA has no key-value groups
        run = harness.trains_on_cpu(tree, *to_argv(kept), iters=ITERS, base=DEEPSEEK_BASE)
    else:
        run = harness.trains_on_cpu(tree, *to_argv(kept), "--num-query-groups", "2", iters=ITERS)
    harness.assert_learns(run.losses, ITERS)
    notes = "; ".join(fitted.notes) or "as written"
    print(f"\n{release} {name}: trained, loss {run.losses[1]:.4f} -> {run.losses[ITERS]:.4f} ({notes})")


def launched_args(recipe, tree, args: dict) -> dict | None:
    """The flags `recipe launch` passes to `tree` for `args`, or None where it refuses (one line)."""
    try:
        return fit.to_tree(recipe, tree, args, set()).args
    except UsageError as refused:
        assert "\n" not in str(refused) and refused.hint and "\n" not in refused.hint, refused
        return None


@pytest.mark.parametrize("name", names())
def test_recipe_layouts_pass_validate_args_where_it_launches(name, applied, tmp_path):
    """Each of the recipe's layouts (its own sizes and GPU counts), as `recipe launch` passes it to the
    tree, passes that tree's parse_args and validate_args (the rest of the recipe is what trains above)."""
    release, tree = applied
    recipe = find(name)
    cases = []
    for layout in recipe.layouts:
        args = launched_args(recipe, tree, recipe.merged_args(layout))
        if args is None:
            pytest.skip(f"recipe launch refuses {name} on {release}")
        cases.append(layout_case(layout.name, recipe, args, layout.world_size))
    for key, run in run_cases(tree, cases, tmp_path).items():
        assert run["returncode"] == 0, f"{release} {name} {key}: {run['output'][-3000:]}"
        assert "validated" in run["output"], f"{release} {name} {key}: {run['output'][-2000:]}"


def test_cpu_launch_trains_saves_and_resumes_with_more_iterations(applied, tmp_path):
    """`recipe launch --device cpu` itself (no dry run): trains the scaled-down recipe over gloo, saves,
    then resumes from the same --save directory with a larger --train-iters."""
    release, tree = applied
    recipe = find("llama3-8b")
    try:
        fit.to_tree(recipe, tree, recipe.merged_args(recipe.layouts[0]), set())
    except UsageError as refused:
        pytest.skip(f"{release}: recipe launch refuses llama3-8b ({refused})")

    def launch(iters: int) -> dict[int, float]:
        command = [sys.executable, "-m", "rocmpatch", "recipe", "launch", "llama3-8b", "-t", str(tree), "--device", "cpu",
                   "--mock-data", "--save", str(tmp_path / "ckpt"), "--", "--train-iters", str(iters), "--eval-iters", "1",
                   "--vocab-size", "512"]  # not Llama 3's 128256: the embedding would be most of the CPU time
        env = harness.clean_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
                                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        proc = harness.run_process(command, cwd=tmp_path, env=env, timeout=900)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        return {i: float(fields["lm loss"]) for i, fields in harness.log_fields(output).items() if "lm loss" in fields}

    assert sorted(launch(3)) == [1, 2, 3]
    assert sorted(launch(5)) == [4, 5], release  # resumed at 3, went on to the new end
