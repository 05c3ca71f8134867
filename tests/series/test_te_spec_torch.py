"""te-spec-torch: without Transformer Engine the TE layer spec (get_gpt_decoder_block_spec(...,
use_transformer_engine=True), get_gpt_layer_with_transformer_engine_spec; dense, MoE, MLA) builds
torch modules with TE's parameter names, shapes and state-dict keys, which compute what the local
implementation computes (patch te-spec-torch).

CI: testkit/checks/te_spec.py on the patched wheel tree, one child (the fixture te_results) and one gloo job
of two ranks (TP 2): upstream's TE spec built with upstream's TESpecProvider (the wheel's
transformer_engine_spec_provider.py, written beside the child) slot by slot against ours; each
module's own parameters against smoke's table of TE's names (rocmpatch.smoke.op_checks.TE_PARAMETERS,
which upstream's own code states: test_te_names_are_upstreams); the
model's names against the local spec's model in TE's names; losses and gradients against the local
spec's from the same weights (fp32); torch_dist saved from ours and loaded back.
Optional (skipped without mbridge and a transformers it supports; CI has neither): testkit/checks/hf_bridge.py
with mbridge on the patched wheel tree: tiny random Llama, Qwen3, Qwen3-MoE and Mixtral checkpoints
load with Hugging Face's logits and export back (TP 1; TP 2 and EP 2 on two gloo ranks); full tree (ROCMPATCH_TEST_UPSTREAM): Hugging Face
weights -> torch_dist -> pretrain_gpt.py --load --finetune -> Hugging Face (docs/training.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

import pytest

from rocmpatch.smoke.op_checks import te_parameter_names
from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("te-spec-torch")

CASES = ("llama", "gpt-layernorm-bias", "qwen3", "moe", "moe-grouped", "mla", "mla-no-q-lora", "deepseek")
SAME_MODEL = ("llama", "gpt-layernorm-bias", "qwen3", "moe", "moe-grouped", "mla", "deepseek")

PROVIDER = "megatron/core/extensions/transformer_engine_spec_provider.py"


@pytest.fixture(scope="module")
def upstream_files(release) -> dict[str, bytes]:
    """megatron/ of the pin as released (the wheel's bytes)."""
    return harness.wheel_files(release)


@pytest.fixture(scope="module")
def te_results(patched_wheel, upstream_files, child_dir) -> dict:
    provider = child_dir / "upstream_te_spec_provider.py"
    provider.write_bytes(upstream_files[PROVIDER])
    return harness.run_checks("checks.te_spec", "spec,names,loss,checkpoint", patched_wheel, child_dir,
                              env={"TE_SPEC_UPSTREAM_PROVIDER": str(provider)})


def test_te_names_are_upstreams(upstream_files):
    """TE_PARAMETERS' names as upstream's own code states them (the wheel's bytes, read as text): the local spec
    maps its norms to the fused linears' layer_norm_ parameters, the TE extension reads
    layer_norm_weight and layer_norm_bias from a TELayerNormColumnParallelLinear and treats
    `_extra_state` as TE's, the TE-op MLP's map names linear_fc1's norm."""
    specs = upstream_files["megatron/core/models/gpt/gpt_layer_specs.py"].decode()
    extension = upstream_files["megatron/core/extensions/transformer_engine.py"].decode()
    assert '"input_layernorm.": "self_attention.linear_qkv.layer_norm_"' in specs
    assert '"pre_mlp_layernorm.": "mlp.linear_fc1.layer_norm_"' in specs
    assert '"mlp.0.weight": "mlp.linear_fc1.layer_norm_weight"' in specs
    assert '"mlp.0.bias": "mlp.linear_fc1.layer_norm_bias"' in specs
    assert "norm_layer.weight.copy_(fused_layer.layer_norm_weight)" in extension
    assert "norm_layer.bias.copy_(fused_layer.layer_norm_bias)" in extension
    assert re.search(r"class TELayerNormColumnParallelLinear\(te\.pytorch\.LayerNormLinear\)", extension)
    assert re.search(r"class TEColumnParallelLinear\(TELinear\)", extension)
    assert re.search(r"class TERowParallelLinear\(TELinear\)", extension)
    assert "_extra_state" in extension


@pytest.mark.parametrize("case", CASES)
def test_each_te_slot_of_upstreams_spec_holds_a_torch_module_standing_for_it(te_results, case):
    """Upstream's TE spec (its TESpecProvider and TENorm) and ours, slot by slot: where upstream puts
    a TE module ours puts the torch module standing for it; every other slot is the same, but the
    activation builder (TEActivationOp, None without TE upstream; refused when built, without TE)."""
    result = te_results["spec"][case]
    assert result["te_slots"], result
    for path, te_module, ours, stands_for in result["te_slots"]:
        assert stands_for == te_module, (path, te_module, ours)
    for path, upstream, ours in result["other_differences"]:
        assert path.endswith(".activation_func") and (upstream, ours) == ("NoneType", "_te_activation_refused"), path
    if case == "moe-grouped":  # upstream's TEGroupedMLP needs TE: ours is the torch grouped one
        assert result["grouped_experts"] == ["TorchGroupedMLP"]


def test_mtp_specs_hold_torch_modules_standing_for_te_s(te_results):
    """DeepSeek's shape (MLA, MoE, one MTP layer): get_gpt_mtp_block_spec(..., use_transformer_engine=True)
    and get_mtp_layer_spec(..., use_transformer_engine=True) (None's call without TE upstream) give the
    torch modules standing for the TE modules upstream's TE spec puts in each MTP slot."""
    slots = {path: (te_module, stands_for) for path, te_module, _, stands_for in te_results["spec"]["deepseek"]["te_slots"]}
    for spec in ("mtp.layer_specs[0]", "mtp_layer"):
        mtp = {path.removeprefix(spec): v for path, v in slots.items() if path.startswith(spec + ".")}
        for norm in (".enorm", ".hnorm", ".layer_norm"):
            assert mtp[norm] == ("TENorm", "TENorm"), (spec, norm, mtp)
        assert mtp[".eh_proj"] == ("TEColumnParallelLinear", "TEColumnParallelLinear")
        assert mtp[".mtp_model_layer.self_attention.linear_q_down_proj"] == ("TELinear", "TELinear")
        assert mtp[".mtp_model_layer.mlp.submodules.shared_experts.submodules.linear_fc2"] == (
            "TERowParallelLinear", "TERowParallelLinear")


@pytest.mark.parametrize("case", CASES)
def test_each_module_has_the_names_of_the_te_module_it_stands_for(te_results, case):
    result = te_results["names"][case]
    linear_bias = case == "gpt-layernorm-bias"
    seen = set()
    for path, te_module, params, keys in result["te_modules"]:
        expected = te_parameter_names(te_module, result["normalization"], linear_bias)
        assert list(params) == expected, (path, te_module, params)
        assert keys == [*expected, "_extra_state"], (path, keys)
        seen.add(te_module)
    assert {"TELayerNormColumnParallelLinear", "TERowParallelLinear", "TENorm", "TEDotProductAttention"} <= seen


@pytest.mark.parametrize("case", CASES)
def test_model_has_the_local_models_parameters_in_te_names(te_results, case):
    """The whole model: the local spec's parameters (names and shapes) with the norms moved into the
    linears they precede; the state dict adds `_extra_state` of the norms and attention, as TE's."""
    result = te_results["names"][case]
    params, local = result["params"], result["local_params_in_te_names"]
    if case == "mla-no-q-lora":  # no query latent: the TE spec fuses a norm into the query projection
        extra = {n for n in params if n.endswith("self_attention.linear_q_proj.layer_norm_weight")}
        assert len(extra) == 2 and {n: s for n, s in params.items() if n not in extra} == local
    else:
        assert params == local
    te_of = {path: te for path, te, _, _ in result["te_modules"]}
    added = set(result["state_keys"]) - set(result["local_state_keys_in_te_names"])
    assert {k for k in added if not k.endswith("layer_norm_weight")} == {
        f"{path}._extra_state" for path, te in te_of.items() if te in ("TENorm", "TEDotProductAttention")}
    assert set(result["local_state_keys_in_te_names"]) <= set(result["state_keys"])


@pytest.mark.parametrize("case", ["llama", "gpt-layernorm-bias", "qwen3"])
def test_sharded_keys_are_the_local_ones_and_the_norms_extra_state(te_results, case):
    """torch_dist keys: the local spec's (upstream maps its norms to TE's names) and the TE norms'
    `_extra_state` (attention leaves it out, as TE's does)."""
    result = te_results["names"][case]
    added = set(result["sharded_keys"]) - set(result["local_sharded_keys"])
    assert set(result["local_sharded_keys"]) <= set(result["sharded_keys"])
    # the layers are stacked in torch_dist: decoder.layers.0.x and .1.x are decoder.layers.x
    norms = {re.sub(r"\.layers\.\d+\.", ".layers.", path) for path, te, _, _ in result["te_modules"] if te == "TENorm"}
    assert added == {f"{path}._extra_state" for path in norms}


@pytest.mark.parametrize("case", SAME_MODEL)
def test_loss_and_gradients_equal_the_local_specs(te_results, case):
    """fp32, one batch, the local model's weights copied into ours by name: bit for bit."""
    result = te_results["loss"][case]
    assert result["same_params"], result
    assert result["ours"] == result["local"] and result["grad_diff"] == 0.0, result


def test_torch_dist_checkpoint_loads_into_the_local_spec_and_back(te_results):
    for case in ("llama", "mla"):
        assert te_results["checkpoint"][case]["diff"] == 0.0, (case, te_results["checkpoint"][case])


def test_te_fp8_extra_state_is_said_once_and_its_absence_loads(te_results):
    result = te_results["checkpoint"]["fp8_extra_state"]
    [[level, line]] = result["records"]
    assert level == "WARNING" and "Transformer Engine FP8 scaling state" in line and "not used" in line
    assert result["missing"] == [] and result["unexpected"] == []
    assert set(map(tuple, map(lambda v: (v[0], tuple(v[1])), result["saved"].values()))) == {("torch.uint8", (0,))}


@pytest.fixture(scope="module")
def tp2_results(patched_wheel, child_dir) -> list:
    workdirs = [child_dir / f"tp2-rank{rank}" for rank in range(2)]
    for workdir in workdirs:
        workdir.mkdir(exist_ok=True)
    return harness.run_ranks("checks.te_spec", "tp2", patched_wheel, workdirs)


def test_tensor_parallel_2_with_sequence_parallelism_equals_the_local_spec(tp2_results):
    for rank in tp2_results:
        result = rank["tp2"]["qwen3"]
        assert result["ours"] == result["local"] and result["grad_diff"] == 0.0, result
        shapes = result["shapes"]
        assert shapes["decoder.layers.0.self_attention.linear_qkv.weight"][0] == 64  # 128 split over 2
        assert shapes["decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"] == [64]  # whole


# ---------------------------------------------------------------- mbridge (optional)

FAMILIES = ("llama", "qwen3", "qwen3_moe", "mixtral")
# The tiny Llama of testkit/checks/hf_bridge.py, as pretrain_gpt.py flags (NullTokenizer's 128 ids: its vocabulary).
HF_LLAMA = [
    "--distributed-backend", "gloo", "--transformer-impl", "local",
    "--num-layers", "2", "--hidden-size", "64", "--ffn-hidden-size", "128", "--num-attention-heads", "4",
    "--group-query-attention", "--num-query-groups", "2", "--kv-channels", "16", "--swiglu",
    "--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--position-embedding-type", "rope",
    "--rotary-base", "10000", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--seq-length", "32", "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "2",
    "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "1", "--mock-data",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128", "--make-vocab-size-divisible-by", "1",
    "--attention-dropout", "0", "--hidden-dropout", "0", "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000",
    "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm",
]


def mbridge_or_skip() -> None:
    if importlib.util.find_spec("mbridge") is None or importlib.util.find_spec("safetensors") is None:
        pytest.skip("mbridge is not installed (pip install --no-deps mbridge; safetensors einops 'transformers<5')")
    if int(importlib.metadata.version("transformers").split(".")[0]) >= 5:
        pytest.skip("mbridge 0.15.1 reads hf_config.rope_theta, which transformers 5 moved: needs transformers<5")


@pytest.fixture(scope="module")
def bridge_results(patched_wheel, child_dir) -> dict:
    mbridge_or_skip()
    workdir = child_dir / "hf-bridge"
    workdir.mkdir(exist_ok=True)
    return harness.run_checks("checks.hf_bridge", ",".join([*FAMILIES, "deepseek_v3"]), patched_wheel, workdir)


@pytest.mark.parametrize("family", FAMILIES)
def test_mbridge_loads_hf_weights_with_hf_logits_and_exports_them(bridge_results, family):
    """fp32 on the CPU: Megatron's logits are Hugging Face's (to float rounding: the MoE routers'
    probabilities are summed in another order), and the exported checkpoint gives the same logits."""
    result = bridge_results[family]
    assert result["logits_diff"] <= 1e-6 * max(1.0, result["scale"]), result
    assert result["export_diff"] == 0.0, result
    assert result["fused_norms"] == 2 and result["input_layernorms"] == 0, result  # TE's names
    assert {"TELayerNormColumnParallelLinear", "TERowParallelLinear", "TENorm"} <= set(result["te_modules"])


def test_mbridge_loads_deepseek_v3_with_the_documented_settings(bridge_results):
    """mbridge 0.15.1's DeepSeek-V3 bridge on core_v0.19.0 with docs/training.md's two settings (its
    config's max_position_embeddings renamed; the plain checkpoint reader): MLA, MoE with a shared
    expert and expert bias, the torch grouped experts; Hugging Face's logits (fp32, CPU)."""
    result = bridge_results["deepseek_v3"]
    assert result["logits_diff"] <= 1e-6 * max(1.0, result["scale"]), result
    assert {"TELinear", "TELayerNormColumnParallelLinear", "TERowParallelLinear", "TENorm"} <= set(result["te_modules"])
    assert result["experts"] == "TorchGroupedMLP"


@pytest.mark.parametrize("layout, families", [("tp2", ("llama", "qwen3_moe")), ("ep2", ("qwen3_moe", "mixtral"))])
def test_mbridge_with_tensor_or_expert_parallelism_2(patched_wheel, tmp_path, layout, families):
    """Two gloo ranks, TP 2 (with sequence parallelism, as mbridge sets it) or EP 2: mbridge splits
    the Hugging Face weights over the ranks and gathers them back."""
    mbridge_or_skip()
    workdirs = [tmp_path / f"rank{rank}" for rank in range(2)]
    for workdir in workdirs:
        workdir.mkdir()
    ranks = harness.run_ranks("checks.hf_bridge", layout, patched_wheel, workdirs,
                              env={"HF_BRIDGE_SHARED_DIR": str(tmp_path)})
    for rank in ranks:
        for family in families:
            result = rank[layout][family]
            assert result["logits_diff"] <= 1e-6 * max(1.0, result["scale"]), (family, result)
            assert result["export_diff"] == 0.0, (family, result)


def test_hf_weights_to_pretrain_gpt_finetune_and_back(patched_wheel, training_tree, tmp_path):
    """docs/training.md's journey at tiny size: Hugging Face weights -> mbridge -> torch_dist ->
    pretrain_gpt.py --load --finetune (the local spec: upstream maps its norms to TE's names) ->
    torch_dist -> mbridge -> Hugging Face, read by transformers."""
    mbridge_or_skip()
    harness.run_checks("checks.hf_bridge", "journey_import", patched_wheel, tmp_path)
    journey = tmp_path / "journey"
    run = harness.pretrain(training_tree, [*HF_LLAMA, "--train-iters", "3", "--load", str(journey / "ckpt-in"),
                                          "--finetune", "--save", str(journey / "ckpt-out"), "--save-interval", "3",
                                          "--ckpt-format", "torch_dist"], processes=1)
    assert run.returncode == 0, run.tail(6000)
    assert len(run.losses) == 3, run.tail()
    result = harness.run_checks("checks.hf_bridge", "journey_export", patched_wheel, tmp_path)["journey_export"]
    assert result["iteration"] == "3" and result["missing"] == [] and result["unexpected"] == []
    # Adam moves each weight by at most the sum of the learning rates (1e-3 + 5.5e-4 + 1e-4): the
    # run started from the Hugging Face weights (they are 0.13 from a random initialization here).
    trained = result["trained"]
    assert 0 < max(trained.values()) <= 1.7e-3 and min(trained.values()) > 0, trained
    assert result["export_diff"] == 0.0


def test_smoke_te_spec_cases_pass_in_each_dtype(smoke_wheel_report):
    """smoke's ops stage builds a layer of the TE spec without TE: TE's names, the local spec's numbers
    (fp32, bf16, fp16)."""
    _, report = smoke_wheel_report
    ops = {s["name"]: s for s in report["stages"]}["ops"]
    te_spec = [c for c in ops["cases"] if c["check"] == "TE layer spec without TE"]
    assert len(te_spec) == 3 and all(c["status"] == "passed" for c in te_spec), te_spec
