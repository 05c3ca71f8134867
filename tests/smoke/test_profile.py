"""The smoke profile of a release (release.yaml `smoke:`): what it says, how it is validated, and what
smoke does for a release that has none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmpatch.errors import InvalidInput
from rocmpatch.series import Location
from rocmpatch.smoke import op_checks
from rocmpatch.smoke.profile import SmokeProfile, load_profile
from rocmpatch.smoke.runner import Plan, run_stages

ROOT = Path(__file__).resolve().parents[2]
RELEASE_0_5_0 = ROOT / "patchsets" / "core_v0.5.0"

VALID = """\
validated: []
smoke:
  imports:
    core: [megatron.core, megatron.core.parallel_state]
    full: [megatron.training, pretrain_gpt]
  ops: [core-softmax, rope]
  train:
    cpu-args: [--no-gradient-accumulation-fusion]
    runs:
    - name: mcore
      args: [--position-embedding-type, rope]
"""


def release_dir(tmp_path: Path, text: str | None, name: str = "core_v9.9.9") -> Path:
    directory = tmp_path / "patchsets" / name
    directory.mkdir(parents=True)
    if text is not None:
        (directory / "release.yaml").write_text(text)
    return directory


def test_profile_of_0_5_0_is_what_smoke_did_before_profiles():
    profile = load_profile(RELEASE_0_5_0)
    assert profile.release == "core_v0.5.0"
    assert profile.core_imports[0] == "megatron.core" and "megatron.core.datasets.gpt_dataset" in profile.core_imports
    assert {"megatron.arguments", "megatron.model.transformer", "pretrain_gpt", "pretrain_t5"} <= set(profile.full_imports)
    names = [check.name for check in op_checks.checks(profile.ops)]
    assert sorted(names) == sorted([  # the checks smoke ran before releases had profiles
        *(f"core softmax {v}" for v in ("causal", "causal-no-mask", "padding", "no-mask")),
        *(f"legacy softmax {v}" for v in ("causal", "padding", "no-mask")),
        "core LayerNorm", "core LayerNorm zero-centered", "legacy LayerNorm", "legacy LayerNorm zero-centered",
        "core RMSNorm", "RoPE apply", "RoPE frequencies", "optimizer Adam step", "optimizer SGD step",
        "grad-accum fusion ColumnParallelLinear", "grad-accum fusion linear_with_grad_accumulation",
        "grad-norm clipping"])
    assert [(run.name, run.args) for run in profile.train.runs] == [
        ("legacy", ()), ("mcore", ("--use-mcore-models", "--transformer-impl", "local"))]
    assert profile.train.script == "pretrain_gpt.py"


def test_profile_round_trips_through_the_child_config(tmp_path):
    profile = load_profile(release_dir(tmp_path, VALID))
    assert SmokeProfile.from_config(profile.to_config()) == profile
    run = profile.train.runs[0]
    assert profile.train.flags(run, "cpu") == ["--no-gradient-accumulation-fusion", "--position-embedding-type", "rope"]
    assert profile.train.flags(run, "rocm") == ["--position-embedding-type", "rope"]


def test_no_release_file_or_no_smoke_section_is_no_profile(tmp_path):
    assert load_profile(release_dir(tmp_path, None, "a")) is None
    assert load_profile(release_dir(tmp_path, "validated: []\n", "b")) is None


@pytest.mark.parametrize("old, new, where, message", [
    ("ops: [core-softmax, rope]", "ops: [core-softmax, flash]", ":6: smoke.ops[1]", "unknown op check 'flash'"),
    ("    full: [megatron.training, pretrain_gpt]\n", "", ":2: smoke.imports.full", None),  # fine: optional
    ("    core: [megatron.core, megatron.core.parallel_state]\n", "", ":4: smoke.imports.core", "missing"),
    ("megatron.core.parallel_state]", "megatron/core]", ":4: smoke.imports.core[1]", "is not a dotted module name"),
    ("pretrain_gpt]", "megatron.core]", ":5: smoke.imports.full", "'megatron.core' is in core too"),
    ("[--no-gradient-accumulation-fusion]", "[--distributed-backend=gloo]", ":8: smoke.train.cpu-args[0]",
     "--distributed-backend is set by smoke itself"),
    ("    - name: mcore\n", "    - name: Mcore Run\n", ":10: smoke.train.runs[0].name", "is not a valid run name"),
    ("  ops: [core-softmax, rope]\n", "  ops: [core-softmax, rope]\n  tests: []\n", ":7: smoke.tests", "unknown key"),
    ("      args: [--position-embedding-type, rope]", "      args: {a: b}", ":11: smoke.train.runs[0].args",
     "expected a list"),
])
def test_bad_profile_names_file_line_and_key(tmp_path, old, new, where, message):
    assert old in VALID
    directory = release_dir(tmp_path, VALID.replace(old, new))
    if message is None:
        assert load_profile(directory) is not None
        return
    with pytest.raises(InvalidInput) as caught:
        load_profile(directory)
    text = str(caught.value)
    assert text.startswith(f"{directory / 'release.yaml'}{where}"), text
    assert message in text


def test_duplicate_runs_and_unknown_ops_hint_the_known_names(tmp_path):
    doubled = VALID + "    - name: mcore\n      args: []\n"
    with pytest.raises(InvalidInput, match=r":12: smoke.train.runs\[1\].name: duplicate run name 'mcore'"):
        load_profile(release_dir(tmp_path, doubled, "a"))
    with pytest.raises(InvalidInput) as caught:
        load_profile(release_dir(tmp_path, VALID.replace("rope]", "ropes]"), "b"))
    assert "core-grad-norm-clipping" in caught.value.hint and "legacy-softmax" in caught.value.hint


def test_release_without_profile_skips_import_ops_and_train_saying_why(tmp_path):
    directory = release_dir(tmp_path, "validated: []\n")
    shutil.copy(RELEASE_0_5_0 / "series.yaml", directory / "series.yaml")
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("raise SystemExit('must not be imported')\n")
    plan = Plan(tree, device="cpu", stages=("import", "ops", "train"),
                series=Location(directory, tmp_path / "upstream.lock"))
    results = run_stages(plan)
    assert [(r.name, r.status) for r in results] == [("import", "skipped"), ("ops", "skipped"), ("train", "skipped")]
    for result in results:
        assert result.detail.startswith("release core_v9.9.9 has no smoke profile (no smoke: section in "
                                        "patchsets/core_v9.9.9/release.yaml)")
        assert result.to_json()["no_profile"] is True


def test_only_listed_op_checks_run():
    """The registry entry names decide which checks exist for a release; module paths which run here."""
    registry = op_checks.REGISTRY
    assert all(check.module_path.startswith("megatron/") for checks in registry.values() for check in checks)
    assert [c.name for c in op_checks.checks(["rope"])] == ["RoPE apply", "RoPE frequencies"]


def test_bad_profile_stops_smoke_before_any_stage(tmp_path):
    pytest.importorskip("torch")  # without it smoke stops first at 'smoke needs PyTorch' (exit 8)
    from click.testing import CliRunner

    from rocmpatch.cli import app

    directory = release_dir(tmp_path, VALID.replace("rope]", "flash]"))
    shutil.copy(RELEASE_0_5_0 / "series.yaml", directory / "series.yaml")
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("")
    result = CliRunner().invoke(app, ["smoke", "--target", str(tree), "--device", "cpu", "--series-dir", str(directory)])
    assert result.exit_code == 3, result.output
    assert "release.yaml:6: smoke.ops[1]: unknown op check 'flash'" in result.output
    assert "smoke: environment" not in result.output
