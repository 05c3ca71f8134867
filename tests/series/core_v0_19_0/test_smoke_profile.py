"""This release's smoke profile (release.yaml `smoke:`): the runs smoke trains on its tree (what only
this release's profile has; every release's smoke runs are tests/series/test_smoke.py)."""

from __future__ import annotations

from rocmpatch.smoke import train_args
from rocmpatch.smoke.profile import load_profile
from testkit.harness import release_of

PATCHSETS = release_of(__file__).series_dir


def test_smoke_trains_a_deepseek_shape_over_expert_parallel_workers():
    """The second run of core_v0.19.0's profile: MLA, MoE with MTP; smoke adds the expert parallel
    size (the largest of 8/4/2 dividing the experts and the workers left by the expert TP size)."""
    profile = load_profile(PATCHSETS)
    runs = {run.name: run for run in profile.train.runs}
    assert list(runs) == ["mcore", "deepseek"]
    flags = profile.train.flags(runs["deepseek"], "cpu")
    assert {"--multi-latent-attention", "--mtp-num-layers", "--moe-router-enable-expert-bias"} <= set(flags)
    cpu = train_args.pretrain_args(train_args.profile_for("cpu"), 2, 10, "bf16", flags)
    assert cpu[-2:] == ["--expert-model-parallel-size", "2"] and "--tensor-model-parallel-size" in cpu
    for world, ep in ((1, None), (2, "2"), (4, "4"), (8, "8")):
        args = train_args.pretrain_args(train_args.profile_for("rocm"), world, 20, "bf16", flags)
        assert (args[-1] if args[-2] == "--expert-model-parallel-size" else None) == ep, (world, args[-4:])
    # expert TP defaults to TP: 8 GPUs at TP 8 leave no room for EP
    assert train_args.expert_parallel_size(8, 8, ["--num-experts", "8"]) == 1
    assert train_args.expert_parallel_size(8, 2, ["--num-experts", "6"]) == 2
    assert train_args.pretrain_args(train_args.profile_for("cpu"), 2, 10, "bf16", list(runs["mcore"].args))[-1] == "--disable-bias-linear"
    assert "--expert-model-parallel-size" in train_args.owned_flags()
