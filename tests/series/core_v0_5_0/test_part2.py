"""Part 2 of the series on CPU, one child process per group of testkit/checks/core_v0_5_0/part2_checks.py.

On the wheel's real megatron/core bytes (CI): layer norm and RMSNorm, the gradient-accumulation
fallback, RoPE, trusted checkpoint loading, a megatron-core GPT (local spec, RoPE, SwiGLU, RMSNorm)
training a few steps with gloo at world size 1, each fallback said once (layer norm options
without apex, Transformer Engine absent or broken), collectives without torch's deprecation
warnings, and (0109 cpu-training) the DDP grad buffers and the timers on CPU over gloo.
On the whole pinned tree (ROCMPATCH_TEST_UPSTREAM): --use-flash-attn's SDPA path against the
unfused softmax path of megatron/model/transformer.py, checkpoint loading through
megatron.checkpointing under torch's default weights_only (and a failed load exiting non-zero),
the legacy ParallelAttention with query groups (0110), the distributed optimizer's state round trip
with torch AdamW's per-parameter step, a checkpoint in apex FusedAdam's layout resumed through
load_checkpoint, and (0109) megatron.optimizer's AdamW/SGD steps (fp32, and bf16/fp16 through
Float16OptimizerWithFloat16Params) against torch's optimizers and clip_grad_norm_fp32 against
torch.nn.utils.clip_grad_norm_.
"""

from __future__ import annotations

import pytest

from testkit.harness import run_checks

pytest.importorskip("torch")

# group: (the tree fixture it runs on, its checks)
GROUPS = {
    "core": ("patched_wheel", (
        "layer_norm",
        "rms_norm",
        "grad_accumulation_fallback",
        "rope",
        "checkpoint_round_trip",
        "gpt_trains_on_cpu",
        "fallbacks_say_so_once",
        "collectives_without_deprecation_warnings",
    )),
    "upstream": ("patched_full", (
        "checkpoint_load_and_failure",
        "sdpa_matches_core_attention",
        "legacy_group_query_attention",
        "distributed_optimizer_step_round_trip",
    )),
    "training_core": ("patched_wheel", ("ddp_grad_buffer_on_cpu", "timers_on_cpu")),
    "training": ("patched_full", (
        "megatron_optimizer_steps", "apex_fused_adam_checkpoint_resumes", "clip_grad_norm_matches_torch",
    )),
}


@pytest.fixture(scope="session")
def part2_results() -> dict[str, dict]:
    return {}  # group: its results, each group run once per session


@pytest.fixture
def group_results(group, release, request, part2_results, tmp_path_factory) -> dict[str, dict]:
    """{check: {"ok", "detail"}} of `group`, run on its tree on first use (`release` asked for by
    name: the tree fixtures below are looked up by name, so the release parameter must be known)."""
    if group not in part2_results:
        tree = request.getfixturevalue(GROUPS[group][0])
        part2_results[group] = run_checks("checks.core_v0_5_0.part2_checks", group, tree, tmp_path_factory.mktemp(f"part2-{group}"))
    return part2_results[group]


@pytest.mark.parametrize("group", GROUPS)
def test_part2_runs_every_check(group_results, group):
    assert sorted(group_results) == sorted(GROUPS[group][1])


@pytest.mark.parametrize(
    ("group", "name"), [(g, name) for g, (_, checks) in GROUPS.items() for name in checks],
    ids=[f"{g}-{name}" for g, (_, checks) in GROUPS.items() for name in checks],
)
def test_part2(group_results, name):
    result = group_results[name]
    assert result["ok"], result["detail"]
