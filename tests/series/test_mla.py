"""mla: multi-latent attention on the local implementation (patches mla-local-attention,
mla-local-no-q-lora, mla-sdpa-value-pad; fusions-optional turns the MLA RoPE kernel off; cpu-rope: YaRN).

CI: testkit/checks/families.py's mla group on the patched wheel tree (the fixture families_results).
Full tree (ROCMPATCH_TEST_UPSTREAM): a tiny DeepSeek-V3 (MLA, a shared expert, a sigmoid router with
expert bias, EP 2, one MTP layer) trains and resumes with pretrain_gpt.py, for the releases that
declare mla, mtp, moe-ep and distopt-resume.
"""

from __future__ import annotations

import re

import pytest

from testkit import harness
from testkit.flags import DEEPSEEK_BASE, DEEPSEEK_V3

pytest.importorskip("torch")
pytestmark = harness.releases_with("mla")

ITERS = 10
# What the log line says about the auxiliary losses: (seq aux loss, MTP loss) per iteration.
AUX_FIELDS = ("seq_load_balancing_loss", "mtp_1 loss")


def test_mla_rope_fusion_turned_off_without_triton(families_results):
    """The MLA RoPE kernel is triton's: without triton (or a GPU) validate_args turns it off in
    one line, instead of the first forward failing inside the kernel launch."""
    result = families_results["mla"]
    assert result["apply_rope_fusion"] is False
    [line] = [line for line in result["warnings"] if "--no-rope-fusion" in line]
    assert "triton" in line and "turning apply_rope_fusion off" in line


def test_mla_attention_with_yarn_rope_runs_on_cpu(families_results):
    result = families_results["mla"]
    assert result["rope_type"] == "yarn"
    mla = result["mla"]
    assert mla["error"] is None, mla
    assert mla["core"] == "DotProductAttention" and mla["rotary"] == "YarnRotaryEmbedding"
    assert mla["shape"] == [32, 2, 64] and mla["finite"]


def test_mla_without_query_latent_builds_with_qk_layernorm(families_results):
    """DeepSeek-V2-Lite's attention on the local implementation: no query latent, so no Q norm and a
    plain query projection; the key-value latent keeps its norm. Before mla-local-no-q-lora this
    was a ValueError at model construction."""
    result = families_results["mla"]["mla_without_q_lora"]
    assert result["error"] is None, result
    assert result["q_proj"] == "ColumnParallelLinear" and result["kv_norm"] == "RMSNorm"  # torch.nn.RMSNorm
    assert result["q_norm"] in ("IdentityOp", "NoneType") and result["shape"] == [32, 2, 64] and result["finite"]


def test_local_attention_takes_query_key_and_value_head_sizes(families_results):
    """Heads of 24 for query/key and 16 for values, through SDPA (its flash kernel alone too) and the
    explicit path, equal plain softmax attention; without k_channels/v_channels both are
    kv_channels, as before."""
    result = families_results["mla"]
    paths = result["dot_product_attention"]
    assert paths["auto"]["sdpa"] and not paths["unfused"]["sdpa"]
    assert paths["flash"].get("sdpa"), paths["flash"]  # the flash kernel alone: values padded (mla-sdpa-value-pad)
    for path in paths.values():
        assert path["shape"] == [32, 2, 64] and path["max_err"] < 1e-5, paths
    assert result["default_heads"] == [result["kv_channels"], 4 * result["kv_channels"]]


@pytest.mark.upstream
def test_deepseek_v3_trains_and_resumes_with_distributed_optimizer(release, training_tree, tmp_path):
    """10 iterations, saving at 5; a run resumed from 5 logs the straight run's losses, the MTP
    loss and the sequence aux loss included (expert bias and MTP layer come back from the checkpoint)."""
    harness.needs_features(release, "mtp", "moe-ep", "distopt-resume")
    ckpt = tmp_path / "ckpt"
    extra = [*DEEPSEEK_V3, "--use-distributed-optimizer"]
    straight = harness.trains_on_cpu(training_tree, *extra, "--save", str(ckpt), "--save-interval", "5",
                                     iters=ITERS, base=DEEPSEEK_BASE)
    harness.assert_learns(straight.losses, ITERS)
    straight_aux = aux_losses(straight)
    assert sorted(straight_aux) == list(range(1, ITERS + 1)), straight.tail()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("5")
    resumed = harness.trains_on_cpu(training_tree, *extra, "--load", str(ckpt), iters=ITERS, base=DEEPSEEK_BASE)
    assert re.search(r"successfully loaded checkpoint from .* at iteration 5\b", resumed.output), resumed.tail(3000)
    assert resumed.losses == {i: straight.losses[i] for i in range(6, ITERS + 1)}, (straight.losses, resumed.losses)
    assert aux_losses(resumed) == {i: straight_aux[i] for i in range(6, ITERS + 1)}


def aux_losses(run: harness.Training) -> dict[int, tuple[str, str]]:
    """{iteration: (seq aux loss, MTP loss)} as logged, of the iterations that logged both."""
    return {i: tuple(fields[f] for f in AUX_FIELDS) for i, fields in run.logged.items() if all(f in fields for f in AUX_FIELDS)}


def test_smoke_attention_kernels_take_mla_heads(smoke_wheel_report):
    """smoke's attention kernel check at deepseek-v2-lite's MLA shape (192/128 heads: values padded,
    mla-sdpa-value-pad) passes with only the flash and memory-efficient kernels allowed."""
    _, report = smoke_wheel_report
    ops = {s["name"]: s for s in report["stages"]}["ops"]
    passed = {c["check"] for c in ops["cases"] if c["status"] == "passed"}
    assert "attention kernels deepseek-v2-lite causal" in passed, ops["cases"]
