"""help-fixed: `pretrain_gpt.py --help` formats every argument's help (patch argparse-help-percent:
upstream's paged-stash help has a bare "10%", which argparse's formatting refuses)."""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("help-fixed")

PATCH = "argparse-help-percent"


def test_help_formats_where_upstream_crashed(release, compat_results, trees, child_dir):
    """The paged-stash docstring's "10%" included; the series without the patch fails as upstream's --help does."""
    assert compat_results["help"]["error"] is None
    assert "Magnitude is headroom (e.g. 1.10 = 10%)." in compat_results["help"]["paged_stash_help"]
    tree = trees.wheel(release, release.patches(without=(PATCH,)))
    result = harness.run_checks("checks.compat", "help", tree, child_dir)["help"]
    assert result["error"].startswith("ValueError"), result  # as upstream's --help
