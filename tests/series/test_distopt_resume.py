"""distopt-resume: the distributed optimizer's torch-Adam step is saved and resumed exactly (patch
distopt-torch-adam-step).

CI: testkit/checks/compat.py's distopt group (DistributedOptimizer's state_dict, load_state_dict and
_set_main_param_and_optimizer_states on a stand-in `self`) on the patched wheel tree, and on the
series before the CPU patches without the patch (upstream's behaviour). Full tree
(ROCMPATCH_TEST_UPSTREAM): pretrain_gpt.py with --use-distributed-optimizer saves and resumes exactly.
"""

from __future__ import annotations

import pytest

from testkit import harness
from tests.series.test_cpu_training import saves_and_resumes_exactly

pytest.importorskip("torch")
pytestmark = harness.releases_with("distopt-resume")

PATCH = "distopt-torch-adam-step"
# The compatibility patches end here: the CPU patches after them build on the patch's lines.
LAST_COMPAT = "te-spec-clear-error"


@pytest.mark.every_release
def test_distributed_optimizer_torch_adam_step_save_and_resume(compat_results):
    result = compat_results["distopt"]
    assert result["have_apex_or_te"] is False  # the torch Adam paths are the ones exercised
    assert result["step_saved_before_any_step"] is None  # saved, not an AssertionError
    assert result["step_saved"] == 3.0
    assert result["steps_after_resume"] == [3.0, 3.0] and not result["step_tensor_shared"]
    assert result["steps_after_two_more"] == [5.0, 5.0]
    assert result["max_param_diff"] == 0.0  # resumed == straight run, bit for bit
    assert result["steps_loaded_from_before_any_step"] == [0.0, 0.0]


def test_distributed_optimizer_check_fails_without_the_patch(release, trees, child_dir):
    """The same check on the compatibility patches minus distopt-torch-adam-step shows upstream's
    behaviour (the CPU patches after them build on its lines, so they are left out too)."""
    tree = trees.wheel(release, release.patches(through=LAST_COMPAT, without=(PATCH,)))
    result = harness.run_checks("checks.compat", "distopt", tree, child_dir)["distopt"]
    assert result["step_saved_before_any_step"].startswith("AssertionError")
    assert result["step_tensor_shared"] and result["steps_after_resume"] == [0.0, 0.0]
    assert result["max_param_diff"] > 1e-5  # and the resumed run drifts from the straight one


@pytest.mark.upstream
def test_llama_trains_saves_and_resumes_exactly_with_distributed_optimizer(release, training_tree, tmp_path):
    harness.needs_features(release, "cpu-training")
    saves_and_resumes_exactly(training_tree, tmp_path / "ckpt", "--use-distributed-optimizer")
