"""mtp: multi-token prediction's loss tracker on the CPU (patch cpu-transformer). CI: testkit/checks/families.py's
mtp group on the patched wheel tree (the fixture families_results). The full-tree run with an MTP layer
is test_mla.py's DeepSeek-V3."""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("mtp")


def test_mtp_loss_tracker_on_cpu(families_results):
    assert families_results["mtp"] == {"error": None, "device": "cpu", "loss_values": [2.5]}
