"""fp8: --fp8-format without Transformer Engine runs the local linear layers' GEMMs in FP8 on
torch._scaled_mm (tensorwise dynamic scaling; patch fp8-tensorwise-local), and refuses in one line
what it cannot run.

CI: testkit/checks/fp8.py on the patched wheel tree: one child for the arguments, the GEMM numerics, the
formats per device, a TransformerBlock's per-layer contexts and the torch grouped experts in FP8
(patch fp8-moe-grouped-local: each expert's GEMMs, the module against BF16); a 2-rank gloo job for
TP 2 + SP.
Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's pretrain_gpt.py under record_calls.py, which counts
every torch._scaled_mm call by operand dtypes (the calls a GPU run makes, with the device's formats):
two iterations on the real CPU kernel; 50 iterations against BF16, a resume and TP 2 + SP with
ROCMPATCH_RECORD_FP8=emulate, where the recorder computes each call as the same GEMM on the
dequantized operands (what the gemm group checks it equals), since the CPU kernel is a reference
loop (about 0.1 s for 128x64x128); Mixtral's shape with EP 2 and --moe-grouped-gemm against BF16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit import harness
from testkit.flags import MIXTRAL, TINY_LLAMA

pytest.importorskip("torch")
pytestmark = harness.releases_with("fp8")

TENSORWISE = ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
RUNS_LINE = ("> FP8 without Transformer Engine: --fp8-recipe tensorwise on torch._scaled_mm, OCP (cpu) formats, "
             "e4m3 forward and e5m2 gradients in the attention and MLP linear layers; the output layer stays in BF16.")
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


@pytest.fixture(scope="module")
def fp8_results(patched_wheel, child_dir) -> dict:
    return harness.run_checks("checks.fp8", "args,gemm,formats,block,te_spec,moe", patched_wheel, child_dir)


def error_of(results: dict, case: str) -> str:
    error = results["args"][case]["error"]
    assert error is not None, results["args"][case]
    assert "\n" not in error, error
    return error


@pytest.mark.parametrize("case, flag", [("hybrid default recipe", "--fp8-recipe delayed"), ("delayed", "--fp8-recipe delayed"),
                                        ("mxfp8", "--fp8-recipe mxfp8"), ("blockwise", "--fp8-recipe blockwise"),
                                        ("custom", "--fp8-recipe custom")])
def test_recipes_other_than_tensorwise_are_refused_naming_the_flag(fp8_results, case, flag):
    error = error_of(fp8_results, case)
    assert error.startswith(f"RuntimeError: {flag} needs Transformer Engine"), error
    assert "--fp8-recipe tensorwise" in error


@pytest.mark.parametrize("case, flag", [("param gather", "--fp8-param-gather"),
                                        ("output proj", "--fp8-output-proj")])
def test_te_only_fp8_options_are_refused_naming_the_flag(fp8_results, case, flag):
    error = error_of(fp8_results, case)
    assert error.startswith(f"RuntimeError: {flag} ") and f"drop {flag}" in error, error


def test_recompute_through_te_s_checkpoint_is_refused_and_full_recompute_runs(fp8_results):
    args = fp8_results["args"]
    error = error_of(fp8_results, "selective mlp")
    assert error.startswith("RuntimeError: --recompute-modules mlp with --fp8-format needs Transformer Engine"), error
    assert error_of(fp8_results, "mtp full recompute").startswith(
        "RuntimeError: --mtp-num-layers with --recompute-granularity full and --fp8-format needs Transformer Engine")
    assert args["selective core_attn"]["error"] is None and args["full recompute"]["error"] is None


@pytest.mark.parametrize("case, says", [("gfx90a", "gfx90a has no FP8 GEMM"),
                                        ("sm80", "compute capability 8.0 has no FP8 GEMM"),
                                        ("no fp8 gemm in build", "has no FP8 GEMM for torch.float8_e4m3fn x torch.float8_e4m3fn on cpu")])
def test_a_device_or_build_without_fp8_gemms_is_refused_at_validation(fp8_results, case, says):
    error = error_of(fp8_results, case)
    assert error.startswith("RuntimeError: --fp8-format hybrid: ") and says in error, error
    assert error.endswith("drop --fp8-format to train in BF16."), error


@pytest.mark.parametrize("case, gradients", [("hybrid tensorwise", E5M2), ("e4m3 tensorwise", E4M3)])
def test_tensorwise_runs_saying_so_after_one_fp8_gemm_per_operand_pair(fp8_results, case, gradients):
    result = fp8_results["args"][case]
    assert result["error"] is None and result["fp8_recipe"] == "tensorwise", result
    line = RUNS_LINE if gradients == E5M2 else RUNS_LINE.replace("e5m2 gradients", "e4m3 gradients")
    assert line in result["lines"], result["lines"]
    pairs = [[E4M3, E4M3]] + ([[E5M2, E4M3]] if gradients == E5M2 else [])
    assert result["probe_calls"] == pairs


MOE_LINE = ("> FP8 without Transformer Engine, MoE: the --moe-grouped-gemm experts' fc1 and fc2 in FP8 (each expert "
            "its own scales), the shared experts as the MLP linear layers; the router in its own dtype.")
MOE_FP8_LINE = ("MoE experts (--moe-grouped-gemm, local) in FP8: one torch._scaled_mm per expert with tokens, forward "
                "and backward, each expert's tensorwise scales (cpu; torch._scaled_grouped_mm has no cpu kernel).")
MOE_GROUPED_LINE = ("MoE experts (--moe-grouped-gemm, local) in FP8: the forward one torch._scaled_grouped_mm, the "
                    "backward one torch._scaled_mm per expert with tokens, each expert's tensorwise scales (cpu).")


def test_grouped_experts_say_they_run_in_fp8(fp8_results):
    result = fp8_results["args"]["grouped experts"]
    assert result["error"] is None and MOE_LINE in result["lines"], result


@pytest.mark.parametrize("case, says", [
    ("sequential experts", "--num-experts with --fp8-format needs --moe-grouped-gemm without Transformer Engine"),
    ("router padding", "--moe-router-padding-for-fp8 pads the routing for Transformer Engine's FP8 grouped GEMM"),
    ("moe_act recompute", "--recompute-modules moe_act with --fp8-format needs Transformer Engine")])
def test_what_moe_fp8_cannot_run_without_te_is_refused_naming_the_flag(fp8_results, case, says):
    error = error_of(fp8_results, case)
    assert error.startswith(f"RuntimeError: {says}"), error


@pytest.mark.parametrize("recipe", ["e4m3", "hybrid"])
@pytest.mark.parametrize("gemm", ["forward", "dgrad", "wgrad"])
def test_each_expert_s_fp8_gemm_matches_the_dequantized_reference(fp8_results, recipe, gemm):
    """The torch grouped experts under FP8 (fp8-moe-grouped-local), 37, 0 and 21 tokens: each expert
    with tokens runs TensorwiseFp8's GEMM (one torch._scaled_mm, its own scales), equal to the GEMM
    of its dequantized operands up to the bf16 output; the expert without tokens runs none."""
    result = fp8_results["moe"][recipe]
    grad_format = E5M2 if recipe == "hybrid" else E4M3
    assert result["forward_calls"] == [[E4M3, E4M3]] * 2, result
    assert result["backward_calls"] == [[grad_format, E4M3]] * 4, result  # dgrad of each, then wgrad of each
    assert result["shapes"] == [[58, 48], [58, 64]]
    assert result[gemm]["err_dequant"] <= 2**-8, result
    assert result[gemm]["err_bf16"] <= (0.1 if gemm != "forward" and grad_format == E5M2 else 0.06), result
    assert result["empty_expert"] == {"rows": 0, "wgrad_zero": True}


def test_where_the_device_has_scaled_grouped_mm_the_forward_is_one_call(fp8_results):
    """torch._scaled_grouped_mm simulated on the CPU (the real op's argument checks on meta tensors,
    then the rowwise-scaled product): the experts' forward is one call, equal to the per-expert
    torch._scaled_mm forward up to bf16 rounding; the backward per expert (e5m2 gradients); said once."""
    result = fp8_results["moe"]["scaled_grouped"]
    assert result["grouped_calls"] == [[E4M3, E4M3]] and result["forward_scaled_mm"] == 0, result
    assert result["backward_scaled_mm"] == [[E5M2, E4M3]] * 4, result
    assert result["err"][0] <= 2**-7 and result["finite_grads"], result
    assert ["INFO", MOE_GROUPED_LINE] in fp8_results["moe"]["module"]["records"]


def test_fp8_grouped_experts_are_within_fp8_noise_of_bf16(fp8_results):
    """TorchGroupedMLP from an FP8 config (upstream's TE-version check passed by, TE's padding off):
    2 GEMMs forward and 4 backward per expert with tokens (3 of 4), none in BF16; the output, the
    input's and the weights' gradients within FP8 rounding of the same weights in BF16 (two GEMMs
    and SwiGLU deep; e5m2 gradients keep 2 mantissa bits); said once which ran."""
    result = fp8_results["moe"]["module"]
    assert result["class"] == "TorchGroupedMLP" and result["layer_fp8"] == "hybrid" and result["module_fp8"] is None
    assert (result["forward"], result["backward"], result["bf16_calls"]) == (6, 12, 0), result
    for largest, norm in (*result["rel_err"].values(), result["grad_rel_err"]):
        assert largest <= 0.15 and norm <= 0.12, result
    assert result["empty_grads_zero"] and not result["active_after"]
    assert result["records"][0] == ["INFO", MOE_FP8_LINE], result["records"]  # the CPU's answer, said first
    # Without --moe-grouped-gemm upstream's check stands (validate_args refuses first, above).
    assert fp8_results["moe"]["sequential config"].startswith("ValueError: "), fp8_results["moe"]


@pytest.mark.parametrize("recipe", ["e4m3", "hybrid", "hybrid, 37 tokens"])
@pytest.mark.parametrize("gemm, operands", [("forward", "x w"), ("dgrad", "g w"), ("wgrad", "g x")])
def test_each_fp8_gemm_matches_the_dequantized_reference(fp8_results, recipe, gemm, operands):
    """One torch._scaled_mm per GEMM, with the recipe's operand formats; its result is the GEMM of
    the dequantized operands up to the bf16 output (2^-8), and within FP8 rounding of BF16's."""
    result = fp8_results["gemm"][f"{recipe} {gemm}"]
    grad_format = E5M2 if recipe.startswith("hybrid") else E4M3
    formats = {"x": E4M3, "w": E4M3, "g": grad_format}
    assert result["calls"] == [[formats[operands[0]], formats[operands[2]]]], result
    assert result["dtype"] == "torch.bfloat16"
    assert result["err_dequant"] <= 2**-8, result
    # The FP8 rounding itself: e4m3 keeps 3 mantissa bits, e5m2 2 (a relative step of 1/8 and 1/4).
    assert result["err_bf16"] <= (0.1 if "g" in operands and grad_format == E5M2 else 0.05), result
    assert all(rows % 16 == 0 for rows in result["padded_rows"]), result  # 37 tokens go in as 48


def test_bf16_paths_and_an_all_zero_tensor(fp8_results):
    """--no-fp8-wgrad and a weight side that is not a multiple of 16 call no FP8 GEMM; zeros quantize to zeros."""
    assert fp8_results["gemm"]["bf16 paths calls"] == 0
    assert fp8_results["gemm"]["zeros"] == {"finite_scale": True, "all_zero": True}


def test_formats_by_device(fp8_results):
    formats = fp8_results["formats"]
    assert formats["cpu"] == ["torch.float8_e4m3fn", "torch.float8_e5m2", "OCP (cpu)"]
    assert formats["gfx942"] == ["torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz", "fnuz (gfx942)"]
    assert formats["gfx950"] == ["torch.float8_e4m3fn", "torch.float8_e5m2", "OCP (gfx950)"]
    assert formats["sm90"] == ["torch.float8_e4m3fn", "torch.float8_e5m2", "OCP (sm_90)"]
    assert formats["gfx90a"].startswith("Fp8Unavailable: gfx90a has no FP8 GEMM")
    assert formats["sm80"].startswith("Fp8Unavailable: compute capability 8.0 has no FP8 GEMM")


def test_block_runs_each_fp8_layer_s_four_linears_in_fp8(fp8_results):
    """TE's per-layer contexts: every layer (QKV, projection, fc1, fc2: 4 GEMMs forward, 8 backward)
    in FP8; --first-last-layers-bf16 keeps layers 1 and 4 in BF16; without fp8 none; nothing leaks
    out of the block (the output layer runs after it)."""
    block = fp8_results["block"]
    assert block["all layers"]["forward_calls_per_layer"] == [4, 4, 4, 4]
    assert block["all layers"]["backward_calls"] == 32
    assert block["all layers"]["dtypes"] == [f"{E4M3} x {E4M3}", f"{E5M2} x {E4M3}"]
    assert block["first/last bf16"]["forward_calls_per_layer"] == [0, 4, 4, 0]
    assert block["first/last bf16"]["backward_calls"] == 16
    assert block["bf16"]["forward_calls_per_layer"] == [0, 0, 0, 0] and block["bf16"]["backward_calls"] == 0
    # Full recompute (tensor_parallel.checkpoint without TE): the forward again in FP8 before each backward.
    assert block["full recompute"]["forward_calls_per_layer"] == [4, 4, 4, 4]
    assert block["full recompute"]["backward_calls"] == 16 + 32
    assert all(case["finite"] and not case["active_after"] for case in block.values() if "finite" in case)
    for recipe, error in block["refused"].items():
        assert error.startswith(f"Fp8Unavailable: fp8_recipe '{recipe}' needs Transformer Engine"), error


@pytest.mark.parametrize("shape", ["llama", "deepseek"])
def test_te_spec_models_run_every_te_linear_in_fp8_and_the_output_layer_in_bf16(fp8_results, shape):
    """The Transformer Engine spec without TE (te-spec-torch): each module standing for a TE linear
    (MLA's duplicated down projections and the MTP layer's too) runs one FP8 GEMM forward, two
    backward, as TE's would; the output layer none."""
    result = fp8_results["te_spec"][shape]
    calls = result["forward_calls"]
    assert calls.pop("output_layer") == 0
    assert set(calls) == set(result["te_modules"]) and set(calls.values()) == {1}, calls
    te_modules = set(result["te_modules"].values())
    assert te_modules == ({"TELayerNormColumnParallelLinear", "TERowParallelLinear"} if shape == "llama" else
                          {"TELayerNormColumnParallelLinear", "TERowParallelLinear", "TELinear", "TEColumnParallelLinear"})
    if shape == "deepseek":
        assert sum(path.startswith("mtp.") for path in calls) == 8, calls  # eh_proj and its layer's 7
    assert result["forward"] == len(calls) and result["backward"] == 2 * len(calls), result
    assert result["dtypes"] == [f"{E4M3} x {E4M3}", f"{E5M2} x {E4M3}"]
    assert result["finite"] and not result["active_after"]


@pytest.mark.parametrize("gemm", ["forward", "dgrad", "wgrad"])
def test_te_spec_duplicated_linear_fp8_gemms_match_the_dequantized_reference(fp8_results, gemm):
    """TorchTELinear (MLA's down projections under the TE spec), 37 tokens: as the local linears' GEMMs."""
    result = fp8_results["te_spec"]["TorchTELinear"]
    assert result["calls"] == [[E4M3, E4M3], [E5M2, E4M3], [E5M2, E4M3]]
    assert result[gemm]["err_dequant"] <= 2**-8, result
    assert result[gemm]["err_bf16"] <= (0.05 if gemm == "forward" else 0.1), result


def test_tensor_parallel_2_with_sequence_parallel(patched_wheel, tmp_path):
    workdirs = [tmp_path / "rank0", tmp_path / "rank1"]
    for workdir in workdirs:
        workdir.mkdir()
    ranks = harness.run_ranks("checks.fp8", "tp", patched_wheel, workdirs)
    for result in (r["tp"] for r in ranks):
        assert result["local_shape"] == [20, 2, 64] and result["out_shape"] == [20, 2, 64], result
        # column forward, row forward; row dgrad + wgrad, column dgrad + wgrad
        assert result["calls"] == [f"{E4M3} x {E4M3}"] * 2 + [f"{E5M2} x {E4M3}"] * 4, result
        assert result["bf16_calls"] == 0
        assert all(err <= 0.08 for err in result["rel_err"].values()), result["rel_err"]


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


def fp8_run(tree, workdir, args, *, processes=1, emulate=True) -> tuple[harness.Training, dict]:
    """pretrain_gpt.py under record_calls.py: the run and rank 0's record."""
    workdir.mkdir(exist_ok=True)
    out = workdir / "record.json"
    env = {"ROCMPATCH_RECORD": str(out), **({"ROCMPATCH_RECORD_FP8": "emulate"} if emulate else {})}
    run = harness.pretrain(tree, args, processes=processes, wrapper=harness.RECORDER, env=env, timeout=900)
    assert run.returncode == 0, run.tail(6000)
    return run, json.loads(Path(f"{out}.0").read_text())


@pytest.mark.upstream
def test_pretrain_gpt_runs_its_linear_layers_in_fp8(training_tree, tmp_path):
    """Two iterations on the real CPU kernel: 2 layers x 4 linears x 4 micro-batches x 2 iterations
    forward (e4m3 x e4m3) and twice that backward (e5m2 gradients), plus validation's one GEMM of
    each pair; the output layer adds none."""
    run, record = fp8_run(training_tree, tmp_path, [*TINY_LLAMA, "--train-iters", "2", "--lr-warmup-iters", "1", *TENSORWISE],
                          emulate=False)
    assert RUNS_LINE in run.output
    assert record["scaled_mm"] == {f"{E4M3} x {E4M3}": 64 + 1, f"{E5M2} x {E4M3}": 128 + 1}, record["scaled_mm"]


@pytest.mark.upstream
def test_pretrain_gpt_without_te_no_longer_trains_bf16_silently(training_tree):
    run = harness.pretrain(training_tree, [*TINY_LLAMA, "--train-iters", "2", "--lr-warmup-iters", "1",
                                                    "--fp8-format", "hybrid"], processes=1)
    assert run.returncode != 0 and "RuntimeError: --fp8-recipe delayed needs Transformer Engine" in run.output
    assert not run.losses


LONG = ["--train-iters", "50", "--lr-warmup-iters", "5"]


@pytest.mark.upstream
def test_fifty_fp8_iterations_end_within_a_few_percent_of_bf16(training_tree, tmp_path):
    bf16 = harness.trains(training_tree, [*TINY_LLAMA, *LONG], processes=1)
    fp8, record = fp8_run(training_tree, tmp_path, [*TINY_LLAMA, *LONG, *TENSORWISE])
    harness.assert_learns(fp8.losses, 50, by=0.5)
    assert abs(fp8.losses[50] - bf16.losses[50]) <= 0.03 * bf16.losses[50], (fp8.losses[50], bf16.losses[50])
    assert record["scaled_mm"][f"{E5M2} x {E4M3}"] == 50 * 4 * 16 + 1, record["scaled_mm"]


@pytest.mark.upstream
def test_fp8_resume_continues_the_straight_run(training_tree, tmp_path):
    """Dynamic scaling keeps no amax history: the checkpoint holds what a BF16 one holds, and a
    resumed FP8 run (distributed optimizer, torch_dist) logs the straight run's losses."""
    ckpt = tmp_path / "ckpt"
    common = [*TINY_LLAMA, *TENSORWISE, "--use-distributed-optimizer", "--ckpt-format", "torch_dist",
              "--train-iters", "4", "--save", str(ckpt), "--save-interval", "2"]
    straight, _ = fp8_run(training_tree, tmp_path / "straight", common)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    resumed, _ = fp8_run(training_tree, tmp_path / "resumed", [*common, "--load", str(ckpt)])
    assert sorted(resumed.losses) == [3, 4], resumed.tail()
    assert {i: resumed.losses[i] for i in (3, 4)} == {i: straight.losses[i] for i in (3, 4)}, (straight.losses,
                                                                                              resumed.losses)


@pytest.mark.upstream
def test_fp8_trains_with_tensor_parallel_2_and_sequence_parallel(training_tree, tmp_path):
    run, record = fp8_run(training_tree, tmp_path, [*TINY_LLAMA, *TENSORWISE, "--train-iters", "4",
                                                    "--tensor-model-parallel-size", "2", "--sequence-parallel"],
                          processes=2)
    harness.assert_learns(run.losses, 4, by=0.0)
    assert record["scaled_mm"][f"{E4M3} x {E4M3}"] == 4 * 8 * 4 + 1, record["scaled_mm"]


MOE_ITERS = 6


@pytest.mark.upstream
def test_mixtral_ep2_grouped_experts_train_in_fp8_within_a_few_percent_of_bf16(training_tree, tmp_path):
    """Mixtral's shape (every layer MoE, 4 experts, top 2), EP 2 on two processes, bf16 with
    --moe-grouped-gemm: the FP8 run's experts call torch._scaled_mm (rank 0: 2 local experts x fc1
    and fc2 x 2 layers x 2 micro-batches per iteration, beside the attention's QKV and projection),
    said once per process, and every loss is within 3% of the BF16 run's."""
    flags = [*TINY_LLAMA, *MIXTRAL, "--moe-grouped-gemm", "--train-iters", str(MOE_ITERS), "--lr-warmup-iters", "1"]
    bf16 = harness.trains(training_tree, flags, timeout=900)
    fp8, record = fp8_run(training_tree, tmp_path, [*flags, *TENSORWISE], processes=2)
    assert sorted(fp8.losses) == list(range(1, MOE_ITERS + 1)), fp8.tail()
    assert all(abs(fp8.losses[i] - bf16.losses[i]) <= 0.03 * bf16.losses[i] for i in bf16.losses), (bf16.losses,
                                                                                                    fp8.losses)
    steps = MOE_ITERS * 2 * 2  # iterations x layers x micro-batches on this rank (DP 2)
    attention, experts = 2 * steps, 2 * 2 * steps
    assert record["scaled_mm"] == {f"{E4M3} x {E4M3}": attention + experts + 1,
                                   f"{E5M2} x {E4M3}": 2 * (attention + experts) + 1}, record["scaled_mm"]
    assert fp8.output.count(MOE_FP8_LINE) == 2 and MOE_LINE in fp8.output, fp8.tail()


def test_smoke_fp8_gemm_case_names_the_formats(smoke_wheel_report):
    """smoke's ops stage runs --fp8-format hybrid --fp8-recipe tensorwise's GEMMs on torch._scaled_mm,
    naming the formats (OCP on the CPU)."""
    _, report = smoke_wheel_report
    ops = {s["name"]: s for s in report["stages"]}["ops"]
    (fp8,) = [c for c in ops["cases"] if c["check"] == "FP8 GEMM (tensorwise, hybrid)"]
    assert fp8["status"] == "passed" and fp8["detail"].startswith("worst: OCP (cpu) [64 x 64 -> 32] "), fp8
