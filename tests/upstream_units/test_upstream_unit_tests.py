"""Upstream's own tests/unit_tests as a check of every series (needs ROCMPATCH_TEST_UPSTREAM).

For each release with a profile (release.yaml `upstream-tests:`): the baseline tree (pin +
the import patches) and the whole series are written from the mirror, the profile's subset of
upstream's tests runs on CPU in both (world size 1, gloo, megatron_on_cpu.py), and no test that
passes on the baseline may fail with the series. The subset takes minutes; the whole suite is
bench/upstream_unit_tests.py. Skipped when the tree's requirements are not installed
(patchsets/<release>/upstream-tests-requirements.txt): without them most tests fail on both trees and
the check proves little.
"""

from __future__ import annotations

import pytest

from testkit.upstream_units import runner

pytestmark = pytest.mark.upstream


@pytest.mark.parametrize("release", sorted(runner.profiles()))
def test_no_upstream_unit_test_that_passes_on_the_baseline_fails_with_the_series(release, upstream_mirror, tmp_path):
    missing = runner.missing_requirements(release)
    if missing:
        pytest.skip(f"pip install -r {runner.profiles()[release].requirements} (missing: {', '.join(missing)})")
    profile = runner.profiles()[release]
    results = {}
    for name, patches in (("baseline", profile.baseline), ("series", None)):
        tree = runner.write_tree(upstream_mirror, release, tmp_path / name / "Megatron-LM", patches)
        results[name] = runner.run_pytest(tree, list(profile.subset), tmp_path / name / "run", block=profile.block,
                                          run_timeout=1200)
    comparison = runner.compare(results["baseline"].outcomes, results["series"].outcomes, profile.tests_dir)
    report = runner.render(comparison, results["series"].outcomes)
    assert sum(o == "passed" for o in results["baseline"].outcomes.values()) > 0, report
    assert comparison.regressions == [], report
