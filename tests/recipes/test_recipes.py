from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode, InvalidInput
from rocmpatch.recipes.catalog import find, load, names, to_argv
from rocmpatch.recipes.memory import estimate

RECIPES = names()


def test_the_four_recipes_are_there():
    assert RECIPES == ["llama3-70b", "llama3-8b", "mixtral-8x7b", "small-radeon"]


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_loads_has_8gpu_and_2node_layouts_and_fits_its_gpu(name):
    recipe = find(name)
    assert recipe.release == "core_v0.19.0"
    shapes = {(l.nodes, l.gpus_per_node) for l in recipe.layouts}
    assert {(1, 8), (2, 8)} <= shapes
    for layout in recipe.layouts:
        assert layout.tokens_per_second is None  # nothing measured yet
        total_gb = recipe.estimate(layout).total_gib * (1 << 30) / 1e9
        assert total_gb <= 0.9 * layout.gpu_memory_gb, (layout.name, total_gb)
        assert "--transformer-impl" in recipe.args  # no Transformer Engine


def test_parameter_counts_match_the_models():
    def params(name):
        recipe = find(name)
        return recipe.estimate(recipe.layouts[0]).params_total / 1e9
    assert 7.9 < params("llama3-8b") < 8.1
    assert 70.0 < params("llama3-70b") < 71.0
    assert 46.0 < params("mixtral-8x7b") < 47.2


def test_memory_estimate_shards_the_optimizer_over_data_parallel():
    args = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4, "--seq-length": 32, "--micro-batch-size": 1,
            "--global-batch-size": 8, "--use-distributed-optimizer": True}
    one, eight = estimate(args, 1000, 1), estimate(args, 1000, 8)
    assert abs(one.optimizer_gib - 8 * eight.optimizer_gib) < 1e-9
    assert one.weights_and_grads_gib == eight.weights_and_grads_gib
    assert abs(one.weights_and_grads_gib * 2 - one.optimizer_gib) < 1e-9  # 6 vs 12 bytes per parameter
    full = estimate({**args, "--recompute-granularity": "full"}, 1000, 1)
    assert full.activations_gib < one.activations_gib


def test_to_argv():
    assert to_argv({"--bf16": True, "--lr": 3e-4, "--x": False, "--split": "99,1,0", "--n": 2}) == ["--bf16", "--lr", "0.0003", "--split", "99,1,0", "--n", "2"]


def test_a_bad_recipe_names_the_file_and_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    good = find("llama3-8b").path.read_text()
    path.write_text(good.replace("--global-batch-size: 128", "--global-batch-size: 12"))
    with pytest.raises(InvalidInput, match="layout 8gpu: global batch 12 is not a multiple"):
        load(path)
    path.write_text(good.replace("summary:", "summry:"))
    with pytest.raises(InvalidInput, match="unknown keys"):
        load(path)
    path.write_text("name: [\n")
    with pytest.raises(InvalidInput, match="invalid YAML"):
        load(path)


def invoke(*args):
    return CliRunner().invoke(app, ["recipe", *args])


def test_list_and_show():
    assert "mixtral-8x7b" in invoke("list").stdout
    shown = invoke("show", "llama3-8b")
    assert shown.exit_code == 0 and "8gpu: sized for" in shown.stdout
    assert invoke("show", "nope").exit_code == ExitCode.USAGE


def test_launch_dry_run_prints_torchrun_srun_and_placeholders(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("")
    result = invoke("launch", "llama3-8b", "--target", str(tmp_path), "--gpus", "8", "--nodes", "1", "--dry-run")
    assert result.exit_code == 0, result.output
    line = result.stdout.strip().splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:4] == ["torchrun", "--standalone", "--nproc-per-node", "8"]
    assert argv[4] == str(tmp_path / "pretrain_gpt.py")
    assert "--data-path $DATA_PATH" in line and "--tokenizer-model $TOKENIZER_MODEL" in line
    assert "--global-batch-size 128" in line and "--bf16" in argv

    slurm = invoke("launch", "llama3-70b", "-t", str(tmp_path), "--nodes", "2", "--slurm", "--dry-run",
                   "--data-path", "/data/my corpus_text_document", "--tokenizer", "meta-llama/Meta-Llama-3-70B").stdout
    assert "srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc-per-node 8" in slurm
    assert "'/data/my corpus_text_document'" in slurm and "--tensor-model-parallel-size 8" in slurm

    mock = invoke("launch", "small-radeon", "-t", str(tmp_path), "--gpus", "1", "--mock-data", "--dry-run").stdout
    assert "--mock-data" in mock and "--tokenizer-type NullTokenizer" in mock and "--vocab-size 32000" in mock


def test_launch_refuses_a_missing_layout_or_target(tmp_path):
    assert invoke("launch", "llama3-70b", "-t", str(tmp_path), "--gpus", "1", "--dry-run").exit_code == ExitCode.TARGET_REFUSED
    (tmp_path / "pretrain_gpt.py").write_text("")
    result = invoke("launch", "llama3-70b", "-t", str(tmp_path), "--gpus", "1", "--dry-run")
    assert result.exit_code == ExitCode.USAGE and "no layout for 1 GPU" in result.output
