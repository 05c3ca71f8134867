"""`recipe launch` knows the target's release: a recipe written for another release is refused
before anything starts, naming both (full tree: a real core_v0.5.0 checkout from the mirror)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode

pytestmark = pytest.mark.upstream


@pytest.mark.parametrize("release, refused", [("core_v0.5.0", True), ("core_v0.19.0", False)])
def test_a_recipe_for_another_release_is_refused(upstream_mirror, tmp_path, release, refused):
    target = tmp_path / "Megatron-LM"
    applied = CliRunner().invoke(app, ["apply", "-t", str(target), "--release", release, "--upstream-url", str(upstream_mirror)])
    assert applied.exit_code == 0, applied.stderr
    result = CliRunner().invoke(app, ["recipe", "launch", "--dry-run", "small-radeon", "-t", str(target), "--mock-data"])
    if refused:
        assert result.exit_code == ExitCode.USAGE and result.stdout == ""
        assert "core_v0.19.0" in result.stderr.splitlines()[0] and release in result.stderr.splitlines()[0]
    else:
        assert result.exit_code == 0 and "pretrain_gpt.py" in result.stdout
