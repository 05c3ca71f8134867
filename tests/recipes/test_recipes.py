from __future__ import annotations

import json
from pathlib import Path
import shlex

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode, InvalidInput
from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes.catalog import find, load, names
from rocmpatch.releases import choose
from rocmpatch.schema import load_lock_file
from rocmpatch.recipes.memory import UPSTREAM_MODEL, estimate, load_upstream_model, moe_layer_freq

RECIPES = names()


def test_the_nine_recipes_are_there():
    assert RECIPES == ["deepseek-v2-lite", "llama3-70b", "llama3-70b-fp8", "llama3-8b", "llama3-8b-32k", "llama3-8b-fp8",
                       "mixtral-8x7b", "qwen3-30b-a3b", "small-radeon"]


FP8_RECIPES = [name for name in RECIPES if name.endswith("-fp8")]


def test_each_llama_recipe_of_amds_guide_has_an_fp8_variant():
    """AMD's Megatron guide runs its Llama recipes (8B and 70B at sequence 8192) with TE_FP8=1 or 0;
    it has no long-context one, so llama3-8b-32k has none."""
    assert FP8_RECIPES == ["llama3-70b-fp8", "llama3-8b-fp8"]


@pytest.mark.parametrize("name", FP8_RECIPES)
def test_an_fp8_recipe_is_its_bf16_recipe_with_fp8_and_counts_its_gemm_buffers(upstream_memory, name):
    """llama3-8b-fp8 and llama3-70b-fp8 differ from their BF16 recipe only by the FP8 flags (and run on
    core_v0.19.0 only); the estimate adds, once, the widest GEMM operand's transient copies:
    6 bytes x tokens x 2 x FFN / TP (fc1's SwiGLU output gradient, its float32 and FP8 copies)."""
    fp8, bf16 = find(name), find(name.removesuffix("-fp8"))
    assert fp8.args == {**bf16.args, "--fp8-format": "hybrid", "--fp8-recipe": "tensorwise"}
    assert fp8.layouts == bf16.layouts and fp8.vocab_size == bf16.vocab_size
    assert fp8.releases.items == ("core_v0.19.0",)
    for layout in fp8.layouts:
        args = fp8.merged_args(layout)
        extra = (estimate(args, fp8.vocab_size, layout.world_size, upstream=upstream_memory).total_gib
                 - estimate(bf16.merged_args(layout), bf16.vocab_size, layout.world_size, upstream=upstream_memory).total_gib)
        tokens = args["--micro-batch-size"] * args["--seq-length"]
        widest = 2 * args["--ffn-hidden-size"] / args["--tensor-model-parallel-size"]
        assert extra == pytest.approx(6 * tokens * widest / (1 << 30)), layout.name


@pytest.fixture(scope="module")
def upstream_memory():
    """Upstream's megatron/training/theoretical_memory_usage.py of core_v0.19.0: the wheel's bytes."""
    from testkit.megatron_wheel import megatron_core_files

    return load_upstream_model(megatron_core_files("core_v0.19.0")[UPSTREAM_MODEL], UPSTREAM_MODEL)


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_loads_has_8gpu_and_2node_layouts_and_fits_its_gpu(name, upstream_memory):
    recipe = find(name)
    pinned = set(load_lock_file(Path(__file__).resolve().parents[2] / "upstream.lock").releases)
    default = choose(None, None).location.release
    assert default in recipe.releases.items and set(recipe.releases.items) <= pinned  # names, no ranges
    shapes = {(l.nodes, l.gpus_per_node) for l in recipe.layouts}
    assert {(1, 8), (2, 8)} <= shapes
    for layout in recipe.layouts:
        assert layout.tokens_per_second is None  # nothing measured yet
        est = recipe.estimate(layout, upstream_memory)
        assert est.source == f"upstream {UPSTREAM_MODEL}"
        total_gb = est.total_gib * (1 << 30) / 1e9
        assert total_gb <= 0.9 * layout.gpu_memory_gb, (layout.name, total_gb)
        assert "--transformer-impl" in recipe.args  # no Transformer Engine


@pytest.mark.parametrize("name", RECIPES)
def test_upstream_counts_weights_and_optimizer_as_rocmpatch_does(name, upstream_memory):
    """Upstream's model is the authority for weights, gradients and Adam states; rocmpatch's own count
    (used without a tree or cache) agrees with it to 1%, and says where it came from."""
    recipe = find(name)
    for layout in recipe.layouts:
        theirs, ours = recipe.estimate(layout, upstream_memory), recipe.estimate(layout)
        assert ours.source.startswith("rocmpatch's own count")
        assert abs(theirs.optimizer_gib - ours.optimizer_gib) <= 0.01 * theirs.optimizer_gib + 0.05, (layout.name, theirs, ours)
        assert theirs.upstream_activations_gib is not None and ours.upstream_activations_gib is None


def test_the_torch_path_adds_to_upstreams_activations(upstream_memory):
    """llama3-8b on 8 GPUs: SwiGLU's gated fc1 output, the norms' inputs, SDPA's q/k/v/output and the
    compiled cross entropy's fp32 tensors are more than upstream's TE formula counts."""
    recipe = find("llama3-8b")
    est = recipe.estimate(recipe.layout_for(8, 1), upstream_memory)
    assert est.activations_gib > 1.2 * est.upstream_activations_gib  # 96.9 vs 75.7 GiB
    # the old foreach Adam's shard-sized temporary is gone; clipping's largest temporary remains
    assert est.temporaries_gib < 1.0 and est.total_gib == pytest.approx(
        est.weights_and_grads_gib + est.optimizer_gib + est.activations_gib)


def test_cpu_estimate_adds_the_composite_rms_norm():
    args = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4, "--seq-length": 32, "--normalization": "RMSNorm"}
    assert estimate(args, 1000, 1, device="cpu").activations_gib > estimate(args, 1000, 1).activations_gib


def test_parameter_counts_match_the_models():
    def params(name):
        recipe = find(name)
        return recipe.estimate(recipe.layouts[0]).params_total / 1e9
    assert 7.9 < params("llama3-8b") < 8.1
    assert 70.0 < params("llama3-70b") < 71.0
    assert 46.0 < params("mixtral-8x7b") < 47.2
    assert 15.6 < params("deepseek-v2-lite") < 15.8  # config.json's model: 15.7B
    assert 30.4 < params("qwen3-30b-a3b") < 30.6  # 30.5B


@pytest.mark.parametrize("flag, value", [("--hybrid-layer-pattern", "M*M*"), ("--hybrid-override-pattern", "M*"), ("--hybrid-attention-ratio", 0.25)])
def test_a_hybrid_model_is_refused_not_counted_as_dense(flag, value):
    args = {"--num-layers": 4, "--hidden-size": 64, "--num-attention-heads": 4, "--seq-length": 32, flag: value}
    with pytest.raises(InvalidInput) as refused:
        estimate(args, 1000, 1)
    assert flag in str(refused.value) and refused.value.exit_code == ExitCode.INVALID_INPUT


def test_memory_estimate_shards_the_optimizer_over_data_parallel():
    args = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4, "--seq-length": 32, "--micro-batch-size": 1,
            "--global-batch-size": 8, "--use-distributed-optimizer": True}
    one, eight = estimate(args, 1000, 1), estimate(args, 1000, 8)
    assert abs(one.optimizer_gib - 8 * eight.optimizer_gib) < 1e-9
    assert one.weights_and_grads_gib == eight.weights_and_grads_gib
    assert abs(one.weights_and_grads_gib * 2 - one.optimizer_gib) < 1e-9  # 6 vs 12 bytes per parameter
    full = estimate({**args, "--recompute-granularity": "full"}, 1000, 1)
    assert full.activations_gib < one.activations_gib


def test_context_parallel_splits_the_tokens_and_shards_the_optimizer_with_data_parallel(upstream_memory):
    """llama3-8b-32k on 8 GPUs (CP 4, DP 2, one 32768-token sequence per micro-batch): each GPU holds
    8192 tokens' activations, as llama3-8b's 8 GPUs hold with one 8192-token sequence, plus the
    ring attention's working memory; the optimizer is sharded over all 8 ranks (DP x CP), as
    llama3-8b's over DP 8. all_gather keeps the whole sequence's K/V and their fp32 gradients."""
    long, short = find("llama3-8b-32k"), find("llama3-8b")
    layout = long.layout_for(8, 1)
    assert long.merged_args(layout)["--context-parallel-size"] == 4
    ring = long.estimate(layout, upstream_memory)
    one_sequence = estimate({**short.merged_args(short.layout_for(8, 1)), "--micro-batch-size": 1}, short.vocab_size, 8,
                            upstream=upstream_memory)
    assert ring.optimizer_gib == pytest.approx(one_sequence.optimizer_gib)
    attention = ring.activations_gib - one_sequence.activations_gib  # 6 q + 28 kv bytes x 8192 tokens
    assert 0.3 < attention < 0.5, (ring, one_sequence)
    gathered = estimate({**long.merged_args(layout), "--cp-comm-type": "all_gather"}, long.vocab_size, 8, upstream=upstream_memory)
    assert gathered.activations_gib > ring.activations_gib + 0.5
    assert ring.upstream_activations_gib == pytest.approx(one_sequence.upstream_activations_gib)


def test_a_layout_whose_sequence_does_not_split_over_context_parallel_is_refused(tmp_path):
    text = find("llama3-8b-32k").path.read_text().replace("--context-parallel-size: 4", "--context-parallel-size: 3", 1)
    bad = tmp_path / "cp3.yaml"
    bad.write_text(text)
    with pytest.raises(InvalidInput) as caught:
        load(bad)
    assert "not a multiple of TP 1 x PP 1 x CP 3" in str(caught.value)
    assert "sequence length not divisible by 2 x CP 3 x TP 1" in str(caught.value)


def test_to_argv():
    assert to_argv({"--bf16": True, "--lr": 3e-4, "--x": False, "--split": "99,1,0", "--n": 2}) == ["--bf16", "--lr", "0.0003", "--split", "99,1,0", "--n", "2"]


def test_a_bad_recipe_names_the_file_and_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    good = find("llama3-8b").path.read_text()
    path.write_text(good.replace("--global-batch-size: 128", "--global-batch-size: 12"))
    with pytest.raises(InvalidInput, match=r"bad.yaml:\d+: layouts\[1\]: layout 8gpu: global batch 12 is not a multiple"):
        load(path)
    path.write_text(good.replace("summary:", "summry:"))
    with pytest.raises(InvalidInput, match=r"bad.yaml:7: summry: unknown key"):
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


def fake_tree(path):
    (path / "pretrain_gpt.py").write_text("")
    return str(path)


DATA = ("--data-path", "/data/corpus_text_document", "--tokenizer", "meta-llama/Meta-Llama-3-8B")


def launch_line(*args):
    result = invoke("launch", "--dry-run", *args)  # before any `--`: what follows it goes to Megatron
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_launch_dry_run_prints_torchrun_and_srun(tmp_path):
    target = fake_tree(tmp_path)
    line = launch_line("llama3-8b", "--target", target, "--gpus-per-node", "8", "--nodes", "1", *DATA)
    argv = shlex.split(line)
    assert argv[:5] == ["CUDA_DEVICE_MAX_CONNECTIONS=1", "torchrun", "--standalone", "--nproc-per-node", "8"]
    assert argv[5] == str(tmp_path / "pretrain_gpt.py")
    assert "--data-path /data/corpus_text_document" in line and "--tokenizer-model meta-llama/Meta-Llama-3-8B" in line
    assert "--global-batch-size 128" in line and "--bf16" in argv and "$" not in line

    slurm = invoke("launch", "llama3-70b", "-t", target, "--nodes", "2", "--slurm", "--dry-run",
                   "--data-path", "/data/my corpus_text_document", "--tokenizer", "meta-llama/Meta-Llama-3-70B").stdout
    assert "srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc-per-node 8" in slurm
    assert "'/data/my corpus_text_document'" in slurm and "--tensor-model-parallel-size 8" in slurm

    mock = launch_line("small-radeon", "-t", target, "--gpus-per-node", "1", "--mock-data")
    cpu = launch_line("small-radeon", "-t", target, "--device", "cpu", "--mock-data")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in cpu and cpu.startswith("CUDA_VISIBLE_DEVICES= HIP_VISIBLE_DEVICES= torchrun ")
    assert "--mock-data" in mock and "--tokenizer-type NullTokenizer" in mock and "--vocab-size 32000" in mock


def test_a_gpu_launch_keeps_the_users_device_connections_and_sets_none_for_fsdp(tmp_path, monkeypatch):
    target = fake_tree(tmp_path)
    fsdp = launch_line("small-radeon", "-t", target, "--gpus-per-node", "1", "--mock-data", "--", "--use-torch-fsdp2")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in fsdp  # FSDP asserts it is not 1
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    assert launch_line("small-radeon", "-t", target, "--gpus-per-node", "1", "--mock-data").startswith("torchrun ")


@pytest.mark.parametrize("args, names", [
    ((), "--data-path"),
    (("--data-path", "/d/x_text_document"), "--tokenizer"),
    (("--mock-data", "--data-path", "/d/x_text_document"), "--mock-data"),
])
def test_launch_without_data_refuses_before_anything_even_in_a_dry_run(tmp_path, args, names):
    for dry in ((), ("--dry-run",)):
        result = invoke("launch", "llama3-8b", "-t", fake_tree(tmp_path), *args, *dry)
        assert result.exit_code == ExitCode.USAGE
        assert names in result.stderr.splitlines()[0] and result.stdout == ""


def test_flags_after_double_dash_replace_or_join_the_recipes(tmp_path):
    line = launch_line("llama3-8b", "-t", fake_tree(tmp_path), *DATA, "--", "--train-iters", "500", "--no-load-optim",
                       "--data-path", "0.7", "/d/a", "0.3", "/d/b")
    argv = shlex.split(line)
    assert argv.count("--train-iters") == 1 and argv[argv.index("--train-iters") + 1] == "500"
    assert "--no-load-optim" in argv and argv.count("--data-path") == 1
    assert argv[argv.index("--data-path") + 1:argv.index("--data-path") + 5] == ["0.7", "/d/a", "0.3", "/d/b"]
    assert invoke("launch", "--dry-run", "llama3-8b", "-t", str(tmp_path), *DATA, "--", "stray").exit_code == ExitCode.USAGE


def test_save_writes_and_resumes_from_one_directory(tmp_path):
    argv = shlex.split(launch_line("llama3-8b", "-t", fake_tree(tmp_path), "--mock-data", "--save", "ckpt/run 1"))
    for flag, value in (("--save", "ckpt/run 1"), ("--load", "ckpt/run 1"), ("--save-interval", "1000")):
        assert argv[argv.index(flag) + 1] == value
    assert "--override-opt_param-scheduler" in argv  # resuming with a larger --train-iters changes the schedule
    argv = shlex.split(launch_line("llama3-8b", "-t", str(tmp_path), "--mock-data", "--save", "c", "--", "--save-interval", "50"))
    assert argv[argv.index("--save-interval") + 1] == "50" and argv.count("--save-interval") == 1


def test_a_recipe_file_path_is_a_name(tmp_path):
    copy = tmp_path / "my-small.yaml"
    copy.write_text(find("small-radeon").path.read_text().replace("--train-iters: 20000", "--train-iters: 77"))
    target = fake_tree(tmp_path)
    assert "--train-iters 77" in launch_line(str(copy), "-t", target, "--gpus-per-node", "1", "--mock-data")
    assert "my-small" in invoke("show", str(copy)).stdout
    missing = invoke("launch", str(tmp_path / "nope.yaml"), "-t", target, "--mock-data", "--dry-run")
    assert missing.exit_code == ExitCode.USAGE and "no recipe file" in missing.stderr


@pytest.mark.parametrize("nodes", [3, 4, 16])
def test_layouts_for_more_nodes_are_derived_from_the_per_node_layout(tmp_path, nodes):
    recipe = find("llama3-70b")
    two = next(l for l in recipe.layouts if l.nodes == 2)
    layout = recipe.layout_for(8, nodes)
    assert layout.nodes == nodes and layout.world_size == 8 * nodes
    assert layout.args["--global-batch-size"] == two.args["--global-batch-size"] * nodes // 2
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size"):
        assert layout.args[flag] == two.args[flag]
    line = launch_line("llama3-70b", "-t", fake_tree(tmp_path), "--nodes", str(nodes), "--mock-data")
    assert f"--nnodes {nodes} --nproc-per-node 8" in line


def test_cpu_runs_a_scaled_down_recipe_over_gloo(tmp_path):
    argv = shlex.split(launch_line("mixtral-8x7b", "-t", fake_tree(tmp_path), "--device", "cpu", "--mock-data"))
    assert argv[:2] == ["CUDA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES="]
    assert argv[2:6] == ["torchrun", "--standalone", "--nproc-per-node", "2"]
    assert argv[argv.index("--distributed-backend") + 1] == "gloo"
    assert argv[argv.index("--hidden-size") + 1] == "64" and argv[argv.index("--num-experts") + 1] == "4"
    assert "--expert-model-parallel-size" not in argv and "--swiglu" in argv
    refused = invoke("launch", "mixtral-8x7b", "-t", str(tmp_path), "--device", "cpu", "--mock-data", "--nodes", "2", "--dry-run")
    assert refused.exit_code == ExitCode.USAGE


def test_gpus_is_a_deprecated_alias_of_gpus_per_node(tmp_path):
    result = invoke("launch", "llama3-8b", "-t", fake_tree(tmp_path), "--gpus", "1", "--mock-data", "--dry-run")
    assert result.exit_code == 0 and "--gpus-per-node 1" in result.stderr
    assert "--nproc-per-node 1" in result.stdout


def test_launch_refuses_a_missing_layout_or_target(tmp_path):
    assert invoke("launch", "llama3-70b", "-t", str(tmp_path), "--mock-data", "--dry-run").exit_code == ExitCode.TARGET_REFUSED
    fake_tree(tmp_path)
    result = invoke("launch", "llama3-70b", "-t", str(tmp_path), "--gpus-per-node", "3", "--mock-data", "--dry-run")
    assert result.exit_code == ExitCode.USAGE and "no layout for 3 GPU(s) per node" in result.output


def test_upstream_model_is_read_from_the_target_tree(tmp_path):
    from testkit.megatron_wheel import megatron_core_files

    from rocmpatch.recipes.memory import upstream_model

    assert upstream_model("core_v0.19.0", tmp_path) is None  # no such file: rocmpatch counts, and says so
    path = tmp_path / UPSTREAM_MODEL
    path.parent.mkdir(parents=True)
    path.write_bytes(megatron_core_files("core_v0.19.0")[UPSTREAM_MODEL])
    module = upstream_model("core_v0.19.0", tmp_path)
    assert callable(module.compute_weight_and_optimizer_memory) and "torch" not in vars(module)


def test_show_says_where_weights_and_optimizer_were_counted():
    shown = invoke("show", "llama3-8b").stdout  # the tests' cache is empty: no upstream model
    assert "weights and optimizer states: rocmpatch's own count (no megatron/training/theoretical_memory_usage.py" in shown.replace("\n", " ")
    doc = json.loads(invoke("show", "llama3-8b", "--json").stdout)
    assert doc["layouts"][0]["memory_estimate"]["weights_and_optimizer_from"].startswith("rocmpatch's own count")


def test_moe_layer_freq_is_read_as_upstream_reads_it_without_running_code():
    assert moe_layer_freq("([0]*1+[1]*26)", 27) == [0] + [1] * 26
    assert moe_layer_freq(2, 4) == 2 and moe_layer_freq("1", 4) == 1
    for bad in ("[__import__('os')]", "[0]*3", "[0,2]", "[0]*3+1", "[0]*10**12", "[0]*(10000*10000)", "[0"):
        with pytest.raises(ValueError, match="--moe-layer-freq"):
            moe_layer_freq(bad, 2)


def test_a_bad_moe_layer_pattern_names_the_recipe_layout(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(find("deepseek-v2-lite").path.read_text().replace("([0]*1+[1]*26)", "([0]*1+[1]*25)"))
    with pytest.raises(InvalidInput, match=r"layout 8gpu: --moe-layer-freq .*expected 27 entries"):
        load(path)


def test_mla_and_moe_counts(upstream_memory):
    """DeepSeek-V2-Lite: its dense first layer holds the 10944-wide MLP, the other 26 the experts; the
    torch path's activations count MLA's latents and concatenated heads and six experts' MLPs per
    token, well above upstream's TE formula (which knows neither). Qwen3's QK norms are ours only."""
    deepseek = find("deepseek-v2-lite")
    layout = deepseek.layout_for(8, 1)
    args = deepseek.merged_args(layout)
    est = deepseek.estimate(layout, upstream_memory)
    all_moe = estimate({**args, "--moe-layer-freq": 1}, deepseek.vocab_size, 8, upstream=upstream_memory)
    assert all_moe.params_total > est.params_total + 60 * 3 * 2048 * 1408 - 3 * 2048 * 10944
    assert est.activations_gib > 2.5 * est.upstream_activations_gib
    qwen = find("qwen3-30b-a3b")
    ours, theirs = qwen.estimate(qwen.layouts[0]), qwen.estimate(qwen.layouts[0], upstream_memory)
    def state_bytes(est):
        return (est.weights_and_grads_gib + est.optimizer_gib) * (1 << 30)
    qk_norms = 48 * 2 * 128 * (6 + 12 / 8)  # bytes per parameter with the distributed optimizer over 8 ranks
    assert state_bytes(ours) - state_bytes(theirs) == pytest.approx(qk_norms, rel=1e-3)


def test_cpu_args_shrink_moe_and_mla_sizes():
    args = find("deepseek-v2-lite").cpu_args(2)
    assert args["--num-experts"] == 4 and args["--moe-router-topk"] == 2 and args["--moe-layer-freq"] == "[0,1]"
    assert (args["--kv-lora-rank"], args["--qk-head-dim"], args["--moe-ffn-hidden-size"]) == (16, 16, 32)
    assert "--num-query-groups" not in args and args["--multi-latent-attention"] is True
    qwen = find("qwen3-30b-a3b").cpu_args(2)
    assert qwen["--kv-channels"] == 16 and "--moe-layer-freq" not in qwen and qwen["--num-query-groups"] == 2
