"""Each recipe, scaled down, trains: its flags (parallel layout, sizes and data aside) on upstream's
pretrain_gpt.py of the default release's patched tree, two CPU processes over gloo. Needs a Megatron-LM
mirror (ROCMPATCH_TEST_UPSTREAM), like the series' other full-tree training tests."""

from __future__ import annotations

import pytest

from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes.catalog import cpu_sizes, find, names
from rocmpatch.releases import choose
from tests.series import harness
from tests.series.flags import DEEPSEEK_BASE

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


@pytest.fixture(scope="module")
def training_tree(upstream_mirror, tmp_path_factory):
    """The default release's (where the recipes are) whole pinned tree of the mirror, patched."""
    harness.needs_training_tools()
    release = harness.Release(choose(harness.ROOT / "patchsets", None).release)
    return harness.Trees(tmp_path_factory).full(release, upstream_mirror)


@pytest.mark.parametrize("name", names())
def test_scaled_down_recipe_trains(name, training_tree):
    recipe = find(name)
    layout = recipe.layouts[0]
    kept = {flag: value for flag, value in recipe.merged_args(layout).items() if flag not in SCALED_AWAY}
    kept.update(cpu_sizes(kept))  # MoE and MLA sizes too: at most 4 experts (a multiple of the two processes)
    if "--expert-model-parallel-size" in recipe.merged_args(layout):
        kept["--expert-model-parallel-size"] = 2  # the recipe's expert parallelism, over the two processes
    if kept.get("--multi-latent-attention"):  # MLA has no key-value groups
        run = harness.trains_on_cpu(training_tree, *to_argv(kept), iters=ITERS, base=DEEPSEEK_BASE)
    else:
        run = harness.trains_on_cpu(training_tree, *to_argv(kept), "--num-query-groups", "2", iters=ITERS)
    harness.assert_learns(run.losses, ITERS)


def test_cpu_launch_trains_saves_and_resumes_with_more_iterations(training_tree, tmp_path):
    """`recipe launch --device cpu` itself (no dry run): trains the scaled-down recipe over gloo, saves,
    then resumes from the same --save directory with a larger --train-iters."""
    import os
    import sys

    def launch(iters: int) -> dict[int, float]:
        command = [sys.executable, "-m", "rocmpatch", "recipe", "launch", "llama3-8b", "-t", str(training_tree), "--device", "cpu",
                   "--mock-data", "--save", str(tmp_path / "ckpt"), "--", "--train-iters", str(iters), "--eval-iters", "1",
                   "--vocab-size", "512"]  # not Llama 3's 128256: the embedding would be most of the CPU time
        env = harness.clean_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
                                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        proc = harness.run_process(command, cwd=tmp_path, env=env, timeout=900)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        return {i: float(fields["lm loss"]) for i, fields in harness.log_fields(output).items() if "lm loss" in fields}

    assert sorted(launch(3)) == [1, 2, 3]
    assert sorted(launch(5)) == [4, 5]  # resumed at 3, went on to the new end
