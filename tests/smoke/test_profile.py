"""The smoke profile of a release (release.yaml `smoke:`): what it says, how it is validated, and what
smoke does for a release that has none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmpatch.errors import InvalidInput
from rocmpatch.releases import choose
from rocmpatch.series import Location
from rocmpatch.smoke import op_checks
from rocmpatch.smoke.profile import SmokeProfile, load_profile
from rocmpatch.smoke.runner import Plan, run_stages

ROOT = Path(__file__).resolve().parents[2]
A_RELEASE = choose(ROOT / "patchsets", None).location.series_dir  # any release's series.yaml will do: the default's

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
    assert "core-grad-norm-clipping" in caught.value.hint and "mixed-fused-layernorm" in caught.value.hint


def test_release_without_profile_skips_import_ops_and_train_saying_why(tmp_path):
    directory = release_dir(tmp_path, "validated: []\n")
    shutil.copy(A_RELEASE / "series.yaml", directory / "series.yaml")
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
    shutil.copy(A_RELEASE / "series.yaml", directory / "series.yaml")
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("")
    result = CliRunner().invoke(app, ["smoke", "--target", str(tree), "--device", "cpu", "--series-dir", str(directory)])
    assert result.exit_code == 3, result.output
    assert "release.yaml:6: smoke.ops[1]: unknown op check 'flash'" in result.output
    assert "smoke: environment" not in result.output


KIND_ENTRY = """\
  - name: old-softmax
    kind: softmax
    label: old
    module: megatron.model.fused_softmax
    enums: megatron.model.enums
    variants: [causal, no-mask]
"""


def with_kind_entry(entry: str = KIND_ENTRY) -> str:
    return VALID.replace("  ops: [core-softmax, rope]\n", "  ops:\n  - core-softmax\n" + entry)


def test_a_release_specific_check_is_data_for_a_kind_of_check(tmp_path):
    profile = load_profile(release_dir(tmp_path, with_kind_entry()))
    assert profile.ops[1] == {"name": "old-softmax", "kind": "softmax", "module": "megatron.model.fused_softmax",
                              "label": "old", "enums": "megatron.model.enums", "variants": ["causal", "no-mask"]}
    assert SmokeProfile.from_config(profile.to_config()) == profile
    checks = op_checks.checks(profile.ops)
    assert [(c.name, c.module_path) for c in checks[-2:]] == [
        ("old softmax causal", "megatron/model/fused_softmax.py"), ("old softmax no-mask", "megatron/model/fused_softmax.py")]


@pytest.mark.parametrize("old, new, where, message", [
    ("kind: softmax", "kind: flash", ":9: smoke.ops[1].kind", "unknown kind 'flash'"),
    ("    enums: megatron.model.enums\n", "", ":8: smoke.ops[1].enums", "kind softmax needs enums:"),
    ("[causal, no-mask]", "[causal, sideways]", ":13: smoke.ops[1].variants[1]", "'sideways' is not a variant of kind softmax"),
    ("name: old-softmax", "name: rope", ":8: smoke.ops[1].name", "'rope' is a REGISTRY check already"),
    ("module: megatron.model.fused_softmax", "module: megatron/model", ":11: smoke.ops[1].module", "is not a valid module name"),
])
def test_a_bad_kind_entry_names_file_line_and_key(tmp_path, old, new, where, message):
    directory = release_dir(tmp_path, with_kind_entry(KIND_ENTRY.replace(old, new)))
    with pytest.raises(InvalidInput) as caught:
        load_profile(directory)
    assert str(caught.value).startswith(f"{directory / 'release.yaml'}{where}: "), str(caught.value)
    assert message in str(caught.value)
