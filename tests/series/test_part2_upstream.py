"""Part 2 of the series on the whole pinned tree (needs ROCMPATCH_TEST_UPSTREAM), on CPU:
--use-flash-attn's SDPA path against the unfused softmax path of megatron/model/transformer.py,
checkpoint loading through megatron.checkpointing under torch's default weights_only, and the
distributed optimizer's state round trip with torch AdamW's per-parameter step."""

from __future__ import annotations

import pytest

from tests.series.part2_helpers import patched_upstream_tree, run_checks

pytest.importorskip("torch")

CHECKS = (
    "checkpoint_load_and_failure",
    "sdpa_matches_core_attention",
    "distributed_optimizer_step_round_trip",
)


@pytest.fixture(scope="session")
def upstream_results(upstream_mirror, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("part2-upstream")
    tree = patched_upstream_tree(upstream_mirror, tmp / "tree")
    return run_checks(tree, "upstream", tmp)


def test_part2_upstream_runs_every_check(upstream_results):
    assert sorted(upstream_results) == sorted(CHECKS)


@pytest.mark.parametrize("name", CHECKS)
def test_part2_upstream(upstream_results, name):
    result = upstream_results[name]
    assert result["ok"], result["detail"]
