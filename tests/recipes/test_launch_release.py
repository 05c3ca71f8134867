"""`recipe launch` knows the target's release (full tree: real checkouts from the mirror): on the
release a recipe lists it goes as written; on another, the flags that tree's Megatron does not know
are left out and named, or, where one sets the model's shape, the launch is refused naming it."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode

pytestmark = pytest.mark.upstream


@pytest.fixture(scope="module")
def trees(upstream_mirror, tmp_path_factory):
    made = {}
    for release in ("core_v0.5.0", "core_v0.19.0"):
        target = tmp_path_factory.mktemp(release) / "Megatron-LM"
        applied = CliRunner().invoke(app, ["apply", "-t", str(target), "--release", release, "--upstream-url", str(upstream_mirror)])
        assert applied.exit_code == 0, applied.stderr
        made[release] = target
    return made


def launch(recipe, target):
    return CliRunner().invoke(app, ["recipe", "launch", "--dry-run", recipe, "-t", str(target), "--mock-data"])


def test_on_its_own_release_the_recipe_goes_as_written(trees):
    result = launch("small-radeon", trees["core_v0.19.0"])
    assert result.exit_code == 0 and "--rotary-base" in shlex.split(result.stdout) and result.stderr == ""


def test_on_another_release_the_flags_its_megatron_lacks_are_left_out_and_named(trees):
    result = launch("small-radeon", trees["core_v0.5.0"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    for flag in ("--rotary-base", "--cross-entropy-fusion-impl", "--no-create-attention-mask-in-dataloader"):
        assert flag not in argv and flag in result.stderr
    assert "--swiglu" in argv and "core_v0.5.0" in result.stderr and "core_v0.19.0" in result.stderr


def test_a_shape_flag_another_release_lacks_is_refused_naming_it(trees):
    result = launch("deepseek-v2-lite", trees["core_v0.5.0"])
    assert result.exit_code == ExitCode.USAGE and result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert "core_v0.5.0's Megatron has no --" in first and "--multi-latent-attention" in first
