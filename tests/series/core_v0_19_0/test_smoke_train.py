"""core_v0.19.0: smoke's train stage on the whole patched tree on the CPU (two workers over gloo),
the DeepSeek-shaped run of the release's profile: multi-latent attention, a dense layer then MoE
with a shared expert over two expert-parallel workers, one MTP layer. Needs a Megatron-LM mirror
(ROCMPATCH_TEST_UPSTREAM), like the series' other full-tree training tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rocmpatch.smoke.profile import load_profile
from rocmpatch.smoke.runner import Plan, run_stages
from tests.series.core_v0_19_0.test_training import tree019  # noqa: F401 (a fixture)

pytestmark = pytest.mark.upstream
pytest.importorskip("torch")

PATCHSETS = Path(__file__).resolve().parents[3] / "patchsets" / "core_v0.19.0"


def test_smoke_trains_the_deepseek_shape_on_cpu(tree019):  # noqa: F811 (the fixture imported above)
    profile = load_profile(PATCHSETS)
    only = dataclasses.replace(profile.train, runs=tuple(r for r in profile.train.runs if r.name == "deepseek"))
    environment, train = run_stages(Plan(tree019, device="cpu", train_iters=5, stages=("environment", "train"),
                                         profile=dataclasses.replace(profile, train=only)))
    assert environment.status == "passed", environment.detail
    assert train.status == "passed", (train.detail, train.extra.get("last_output"))
    [run] = train.extra["runs"]
    assert run["path"] == "deepseek" and run["expert_parallel"] == 2 and run["iterations"] == 5
    assert run["last_loss"] < run["first_loss"]
    assert train.extra["tensor_parallel"] == 2 and "deepseek EP=2 loss" in train.detail
