"""grouped-gemm: --moe-grouped-gemm without Transformer Engine runs the experts as torch grouped
GEMMs (TorchGroupedMLP: TEGroupedMLP's forward, parameters and sharded state dict, with
torch.nn.functional.grouped_mm linears; patch moe-grouped-gemm-local), exact against SequentialMLP.

CI: testkit/checks/grouped_gemm.py on the patched wheel tree, one child (the fixture grouped_results):
both classes from one seed, forward and backward with empty experts, fp32 and bf16; the kernel
said once and the per-expert fallback for shapes the kernel refuses; the local spec's choice; the
state dict against upstream's TEGroupedLinear layout and SequentialMLP's sharded keys; torch_dist
saved by one class and loaded by the other; --recompute-modules moe_act on and off (the same output
and gradients, fewer bytes held after the forward) and what it is still refused with.
Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's pretrain_gpt.py, grouped against sequential in fp32:
expert parallelism 2 over the alltoall and the allgather dispatchers, tensor parallelism 2 with expert
tensor parallelism 2, token drop and pad to capacity; a run resumed with the distributed optimizer
logs the straight run's losses; DeepSeek-V3's shape in bf16; --recompute-modules moe_act logs the
losses of the run without it.
"""

from __future__ import annotations

import re

import pytest

from testkit import harness
from testkit.flags import DEEPSEEK_BASE, DEEPSEEK_V3, EXPERT_PARALLEL_2, FP32_LLAMA, MIXTRAL, QWEN3_MOE, TINY_LLAMA, without

pytest.importorskip("torch")
pytestmark = harness.releases_with("grouped-gemm")

KERNEL_LINE = "MoE experts (--moe-grouped-gemm, local): one torch.nn.functional.grouped_mm per linear layer"
FALLBACK_LINE = "MoE experts (--moe-grouped-gemm, local): torch.nn.functional.grouped_mm has no kernel for"


@pytest.fixture(scope="module")
def grouped_results(patched_wheel, child_dir) -> dict:
    return harness.run_checks("checks.grouped_gemm", "kernel,exact,recompute,layer,state_dict,checkpoint",
                              patched_wheel, child_dir)


@pytest.mark.parametrize("case", ["swiglu fp32", "swiglu bf16", "swiglu fused bf16", "gelu fp32", "all empty bf16",
                                  "one expert bf16"])
def test_grouped_experts_equal_sequential(grouped_results, case):
    """One seed gives both classes the same weights; the forward and backward agree exactly on the
    CPU (fp32 and bf16 have a grouped kernel there), and experts that get no token get zero gradients."""
    result = grouped_results["exact"][case]
    assert result["class"] == "TorchGroupedMLP" and result["same_init"], result
    assert result["out_diff"] == 0.0 and result["dx_diff"] == 0.0 and result["grad_diff"] == 0.0, result
    assert result["empty_expert_grads_zero"], result


@pytest.mark.parametrize("case", ["swiglu fp32", "swiglu bf16", "swiglu fused bf16", "gelu fp32"])
def test_moe_act_recompute_gives_the_same_gradients_holding_less(grouped_results, case):
    """--recompute-modules moe_act (TEGroupedMLP's forward, which the torch experts run): the output
    and gradients are bitwise those without it on the CPU, and after the forward autograd holds at
    least the activation's output fewer bytes (fc2 saves that tensor; CheckpointWithoutOutput frees
    its storage and refills it in the backward). Unfused SwiGLU also drops its intermediates."""
    result = grouped_results["recompute"][case]
    assert result["recompute"] == [False, True] and result["bitwise"], result
    held_without, held_with = result["held_bytes"]
    assert held_without - held_with >= result["activation_bytes"] > 0, result


def test_what_moe_act_recompute_cannot_run_with_is_refused(grouped_results):
    result = grouped_results["recompute"]
    assert result["fp8 refused"] is not None, result  # upstream's TransformerConfig, without TE
    if result["offloading refused"] != "no such option":  # the release has fine-grained offloading
        assert result["offloading refused"].startswith("--fine-grained-activation-offloading needs Transformer "
                                                       "Engine"), result


def test_kernel_is_said_once_per_dtype_and_a_refused_shape_falls_back_saying_so(grouped_results):
    kernel = grouped_results["kernel"]
    assert kernel["records"] == [
        ["INFO", f"{KERNEL_LINE} for all local experts (float32 on cpu)."],
        ["INFO", f"{KERNEL_LINE} for all local experts (bfloat16 on cpu)."],
        [kernel["records"][2][0], kernel["records"][2][1]],
    ], kernel["records"]
    level, line = kernel["records"][2]
    # 12 and 20 bf16 values are rows of 24 and 40 bytes: the kernel takes multiples of 16 only.
    assert level == "WARNING" and line.startswith(f"{FALLBACK_LINE} bfloat16 [12 -> 40] on cpu here"), line
    assert line.endswith("those experts run one matmul each (SequentialMLP's math)."), line
    assert kernel["choices"]["torch.bfloat16 12->40"] is False and kernel["choices"]["torch.bfloat16 32->96"] is True
    assert kernel["odd_shape_diff"] == 0.0


def test_backward_keeps_no_stacked_copy_of_the_weights(grouped_results):
    """The autograd graph holds the input, the offsets and each expert's own weight; a [experts, out,
    in] stack kept until the backward would be a copy of every expert's weights per layer."""
    assert grouped_results["kernel"]["saved_shapes"] == [[6, 32], [4]] + [[96, 32]] * 4


def test_local_spec_builds_grouped_experts_only_with_the_flag(grouped_results):
    assert grouped_results["layer"] == {"True": "TorchGroupedMLP", "False": "SequentialMLP"}


def test_smoke_grouped_gemm_cases_name_the_kernel(smoke_wheel_report):
    """smoke's ops stage runs --moe-grouped-gemm's expert GEMMs at the MoE recipes' shapes (scaled
    down on the CPU), each naming the kernel that ran: torch's grouped GEMM has fp32 and bf16 kernels
    on the CPU."""
    _, report = smoke_wheel_report
    ops = {s["name"]: s for s in report["stages"]}["ops"]
    grouped = [c for c in ops["cases"] if c["check"].startswith("grouped GEMM ")]
    assert {c["check"] for c in grouped} == {f"grouped GEMM {r} experts" for r in
                                             ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite")}, ops["cases"]
    assert all(c["status"] == "passed" and "torch.nn.functional.grouped_mm" in c["detail"] for c in grouped), grouped


def te_grouped_keys(prefix: str, experts: int, bias: bool) -> list[str]:
    """The keys upstream's TEGroupedLinear._sharded_state_dict_grouped gives a linear (read from
    megatron/core/extensions/transformer_engine.py): weight{i}, _extra_state ('' for expert 0, then
    1..), bias{i}."""
    keys = [f"{prefix}weight{i}" for i in range(experts)]
    keys += [f"{prefix}_extra_state{'' if i == 0 else i}" for i in range(experts)]
    keys += [f"{prefix}bias{i}" for i in range(experts)] if bias else []
    return keys


def global_entries(described: dict) -> list[tuple]:
    """(sharded key, global shape, global offset, local shape) of every entry, sorted."""
    return sorted((d["key"], tuple(d.get("global_shape", ())), tuple(d.get("global_offset", ())),
                   tuple(d.get("local_shape", ())), d.get("factory")) for d in described.values())


@pytest.mark.parametrize("case, bias", [("swiglu", False), ("gelu bias", True)])
def test_state_dict_is_te_grouped_layout_with_sequential_sharded_keys(grouped_results, case, bias):
    result = grouped_results["state_dict"][case]
    fc1_out = 96 if case == "swiglu" else 48  # SwiGLU doubles fc1
    expected = {f"linear_fc1.weight{i}": [fc1_out, 32] for i in range(4)} | {f"linear_fc2.weight{i}": [32, 48]
                                                                             for i in range(4)}
    if bias:
        expected |= {f"linear_fc1.bias{i}": [fc1_out] for i in range(4)} | {f"linear_fc2.bias{i}": [32] for i in range(4)}
    expected |= {"linear_fc1._extra_state": [0], "linear_fc2._extra_state": [0]}  # TE's empty FP8 state
    assert result["state_dict"] == expected
    prefix = "mlp.experts."
    assert sorted(result["grouped"]) == sorted(te_grouped_keys(f"{prefix}linear_fc1.", 4, bias)
                                               + te_grouped_keys(f"{prefix}linear_fc2.", 4, bias))
    # Upstream's TEGroupedMLP promises a sharded state dict interchangeable with SequentialMLP's.
    assert global_entries(result["grouped"]) == global_entries(result["sequential"])


@pytest.mark.parametrize("direction", ["grouped->sequential", "sequential->grouped"])
def test_torch_dist_checkpoint_loads_into_the_other_class(grouped_results, direction):
    result = grouped_results["checkpoint"][direction]
    assert result == {"equal": True, "missing": [], "unexpected": [], "params": 8}, result


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


def moe_run(tree, flags: list[str], *extra: str) -> harness.Training:
    return harness.trains(tree, [*flags, "--train-iters", "6", *extra], timeout=900)


@pytest.mark.upstream
def test_expert_parallel_grouped_equals_sequential_in_fp32(training_tree):
    """Mixtral's shape, EP 2 over the alltoall dispatcher, fp32: the grouped experts log the losses of
    the sequential ones (one seed, one weight init), and each of the two processes says its kernel once."""
    sequential = moe_run(training_tree, [*FP32_LLAMA, *MIXTRAL])
    grouped = moe_run(training_tree, [*FP32_LLAMA, *MIXTRAL], "--moe-grouped-gemm")
    assert sorted(grouped.losses) == list(range(1, 7)), grouped.tail()
    assert all(abs(grouped.losses[i] - sequential.losses[i]) <= 1e-5 * sequential.losses[i] for i in sequential.losses), \
        (sequential.losses, grouped.losses)
    assert grouped.output.count(KERNEL_LINE) == 2, grouped.tail()
    assert KERNEL_LINE not in sequential.output and "--moe-grouped-gemm needs" not in grouped.output


@pytest.mark.upstream
def test_deepseek_shape_with_grouped_experts_trains_in_bf16(training_tree):
    """DeepSeek-V3's shape (shared expert, expert bias, MTP), EP 2, bf16: trains, within bf16 noise
    of the sequential experts."""
    sequential = moe_run(training_tree, [*DEEPSEEK_BASE, *DEEPSEEK_V3])
    grouped = moe_run(training_tree, [*DEEPSEEK_BASE, *DEEPSEEK_V3], "--moe-grouped-gemm")
    harness.assert_learns(grouped.losses, 6)
    assert all(abs(grouped.losses[i] - sequential.losses[i]) <= 2e-2 * sequential.losses[i] for i in sequential.losses), \
        (sequential.losses, grouped.losses)
    assert len(re.findall(re.escape(KERNEL_LINE), grouped.output)) == 2, grouped.tail()  # once per process


MOE_ACT_RECOMPUTE = ["--recompute-granularity", "selective", "--recompute-modules", "moe_act"]


@pytest.mark.upstream
def test_moe_act_recompute_logs_the_losses_of_the_run_without_it(training_tree):
    """Mixtral's shape, EP 2, fp32, grouped experts: with the experts' activation recomputed in the
    backward (its output freed after the forward) the losses are those of the run without it, equal:
    the recompute runs the same ops on the same inputs."""
    flags = [*FP32_LLAMA, *MIXTRAL, "--moe-grouped-gemm"]
    straight = moe_run(training_tree, flags)
    recomputed = moe_run(training_tree, [*flags, *MOE_ACT_RECOMPUTE])
    assert sorted(straight.losses) == list(range(1, 7)), straight.tail()
    assert recomputed.losses == straight.losses, (straight.losses, recomputed.losses)
    assert recomputed.output.count(KERNEL_LINE) == 2, recomputed.tail()


MIXTRAL_EXPERTS = without(MIXTRAL, *EXPERT_PARALLEL_2[::2])  # Mixtral's router and experts, no layout
LAYOUTS = {  # the model's experts and the layout
    "EP 2 allgather": [*MIXTRAL_EXPERTS, "--moe-token-dispatcher-type", "allgather", "--expert-model-parallel-size", "2"],
    "TP 2 expert TP 2": [*MIXTRAL_EXPERTS, "--moe-token-dispatcher-type", "alltoall", "--tensor-model-parallel-size", "2",
                         "--sequence-parallel", "--expert-tensor-parallel-size", "2"],
    "EP 2 drop and pad": [*MIXTRAL, "--moe-expert-capacity-factor", "1.0", "--moe-pad-expert-input-to-capacity"],
    "Qwen3-MoE EP 2": QWEN3_MOE,  # 8 experts of 32, QK norm, every layer MoE, alltoall
}


@pytest.mark.upstream
@pytest.mark.parametrize("layout", LAYOUTS)
def test_grouped_equals_sequential_in_each_layout(training_tree, layout):
    """The other dispatcher, the experts' weights split by expert tensor parallelism (each rank's grouped
    GEMM holds a slice of every expert), and capacity-padded experts (tokens dropped, zero rows added):
    the grouped experts log the sequential ones' fp32 losses."""
    flags = [*FP32_LLAMA, *LAYOUTS[layout]]
    sequential = moe_run(training_tree, flags)
    grouped = moe_run(training_tree, flags, "--moe-grouped-gemm")
    assert sorted(grouped.losses) == list(range(1, 7)), grouped.tail()
    assert all(abs(grouped.losses[i] - sequential.losses[i]) <= 1e-5 * sequential.losses[i] for i in sequential.losses), \
        (sequential.losses, grouped.losses)
    assert KERNEL_LINE in grouped.output and "--moe-grouped-gemm needs" not in grouped.output


@pytest.mark.upstream
def test_grouped_experts_resume_exactly_with_the_distributed_optimizer(training_tree, tmp_path):
    """EP 2, bf16, the distributed optimizer, torch_dist checkpoints at 3 and 6: a run resumed from 3
    logs the straight run's losses for 4-6 (the grouped weights and their optimizer state round-trip).
    bf16, as training runs: in fp32 the distributed optimizer's shards are views of the parameters, and
    upstream's dp_reshardable load copies into them with autograd on ("a view of a leaf Variable that
    requires grad is being used in an in-place operation", the experts' kind aside)."""
    ckpt = tmp_path / "ckpt"
    flags = [*TINY_LLAMA, *MIXTRAL, "--moe-grouped-gemm", "--use-distributed-optimizer"]
    straight = moe_run(training_tree, flags, "--save", str(ckpt), "--save-interval", "3")
    assert (ckpt / "iter_0000003" / "metadata.json").is_file(), straight.tail()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("3")
    resumed = moe_run(training_tree, flags, "--load", str(ckpt))
    assert re.search(r"successfully loaded checkpoint from .* at iteration 3\b", resumed.output), resumed.tail()
    assert resumed.losses == {i: straight.losses[i] for i in (4, 5, 6)}, (straight.losses, resumed.losses)
