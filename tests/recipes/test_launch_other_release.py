"""`recipe launch` on a tree of a release the recipe does not list: the flags that tree's Megatron
knows (read from its arguments.py without running it) are passed, the others left out and named; a
flag given on the command line or one that sets the model's shape is refused, naming it.

The fixture: a tiny "Megatron" upstream with two pinned releases (mini_v1, mini_v2), whose
arguments.py declares flags both ways Megatron does (add_argument calls, and a dataclass read by
ArgumentGroupFactory), less the ones a test leaves out; a target applied with mini_v1."""

from __future__ import annotations

import re

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocmpatch import gitcmd
from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from rocmpatch.operations import locking
from rocmpatch.recipes import tree_flags
from rocmpatch.recipes.catalog import find
from tests.fixtures import Upstream, commit_all, patch_texts, write_files, write_lock, write_series

RECIPE = "small-radeon"
DATA = ("--mock-data",)
# What the fixture's dataclass declares (as ArgumentGroupFactory reads it): --num-layers, --hidden-size,
# --swiglu; the rest are add_argument calls.
CONFIG = '''from dataclasses import dataclass, field


@dataclass
class ParallelConfig:
    tensor_model_parallel_size: int = 1


@dataclass
class ModelConfig(ParallelConfig):
    num_layers: int = 0
    hidden_size: int = 0
    swiglu: bool = False
    internal: int = field(default=0, init=False)
    skipped: int = 0
'''


def arguments_py(leave_out: set[str]) -> str:
    recipe = find(RECIPE)
    flags = set(recipe.args) | {f for layout in recipe.layouts for f in layout.args}
    flags |= {"--mock-data", "--tokenizer-type", "--vocab-size", "--tokenizer-model", "--data-path", "--save", "--load",
              "--save-interval", "--override-opt_param-scheduler", "--train-iters"}
    from_dataclass = {"--num-layers", "--hidden-size", "--swiglu", "--tensor-model-parallel-size"}
    calls = "".join(f"    group.add_argument({flag!r})\n" for flag in sorted(flags - from_dataclass - leave_out))
    exclude = [name for name in ("num_layers", "hidden_size") if f"--{name.replace('_', '-')}" in leave_out]
    return ("import argparse\n\n\ndef _add_args(parser):\n"
            "    from megatron.core.model_config import ModelConfig\n"
            "    from megatron.training.argument_utils import ArgumentGroupFactory\n"
            f"    exclude = {exclude + ['skipped']!r}\n"
            "    ArgumentGroupFactory(ModelConfig, exclude=exclude).build_group(parser)\n"
            "    group = parser.add_argument_group('rest')\n" + calls + "    return parser\n")


def mini_megatron(tmp: Path, leave_out: set[str]) -> tuple[Upstream, str]:
    """An upstream repo: v1 and, one commit later, v2 (the same files)."""
    path = tmp / "upstream"
    repo = gitcmd.init_repo(path)
    write_files(path, {"pretrain_gpt.py": "# pretrain\n", "megatron/__init__.py": "", "megatron/core/__init__.py": "",
                       "megatron/core/model_config.py": CONFIG, "megatron/training/__init__.py": "",
                       "megatron/training/arguments.py": arguments_py(leave_out)})
    v1 = commit_all(path, "v1")
    gitcmd.run(repo, "tag", "v1")
    write_files(path, {"README.md": "v2\n"})
    v2 = commit_all(path, "v2")
    gitcmd.run(repo, "tag", "v2")
    return Upstream(path, "v1", v1, gitcmd.tree_of(repo, v1), v2), v2


@pytest.fixture
def mini(tmp_path, monkeypatch):
    """make(leave_out) -> a target applied with mini_v1 whose arguments.py lacks `leave_out`."""
    def make(leave_out: set[str] = frozenset()) -> Path:
        upstream, v2 = mini_megatron(tmp_path, set(leave_out))
        texts = patch_texts(upstream, [("rocm", {"megatron/core/rocm.py": "ROCM = 1\n"})])
        for release, ref, commit in (("mini_v1", "v1", upstream.commit), ("mini_v2", "v2", v2)):
            location = write_series(tmp_path / "proj", texts, release=release)
            write_lock(location, locking.Pin(upstream.url, ref, commit))
        monkeypatch.setenv("ROCMPATCH_SERIES_DIR", str(tmp_path / "proj" / "patchsets"))
        target = tmp_path / "Megatron-LM"
        applied = CliRunner().invoke(app, ["apply", "-t", str(target), "--release", "mini_v1"])
        assert applied.exit_code == 0, applied.output
        return target
    return make


def recipe_file(tmp_path: Path, releases: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(re.sub(r"^releases: .*$", f"releases: {releases}", find(RECIPE).path.read_text(), count=1, flags=re.M))
    return str(path)


def launch(recipe: str, target: Path, *extra: str):
    return CliRunner().invoke(app, ["recipe", "launch", recipe, "-t", str(target), "--gpus-per-node", "1", "--dry-run", *DATA, *extra])


def test_the_reader_follows_add_argument_and_the_dataclass_factory(mini):
    target = mini({"--hidden-size", "--cross-entropy-fusion-impl"})
    known = tree_flags.read(target)
    assert known.source == "megatron/training/arguments.py" and known.unresolved == ()
    assert {"--num-layers", "--swiglu", "--tensor-model-parallel-size", "--bf16"} <= known.flags
    assert not {"--hidden-size", "--cross-entropy-fusion-impl", "--internal", "--skipped"} & known.flags


def test_a_flag_the_tree_lacks_is_left_out_and_named(mini, tmp_path):
    target = mini({"--cross-entropy-fusion-impl"})
    result = launch(recipe_file(tmp_path, "mini_v2.."), target)
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.stdout)
    assert "--cross-entropy-fusion-impl" not in argv and "--cross-entropy-loss-fusion" in argv and "--swiglu" in argv
    assert "not passing --cross-entropy-fusion-impl" in result.stderr and "mini_v1" in result.stderr


def test_on_a_release_it_lists_the_recipe_goes_as_written(mini, tmp_path):
    target = mini({"--cross-entropy-fusion-impl"})
    result = launch(recipe_file(tmp_path, "[mini_v1, mini_v2]"), target)
    assert result.exit_code == 0 and "--cross-entropy-fusion-impl" in shlex.split(result.stdout)
    assert launch(recipe_file(tmp_path, "..mini_v1"), target).exit_code == 0


@pytest.mark.parametrize("missing, extra", [("--hidden-size", ()), ("--num-query-groups", ()),
                                            ("--my-flag", ("--", "--my-flag", "1"))])
def test_a_shape_flag_or_one_given_on_the_command_line_is_refused_naming_it(mini, tmp_path, missing, extra):
    target = mini({missing})
    result = launch(recipe_file(tmp_path, "mini_v2"), target, *extra)
    assert result.exit_code == ExitCode.USAGE and result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert f"has no {missing}" in first and "mini_v1" in first and "mini_v2" in first


@pytest.mark.parametrize("releases, problem", [("core_v0.19.0", "'core_v0.19.0' is no release"), ("mini_v2..mini_v1", "newer than"),
                                               ("'mini_v1...'", "neither a release name"), ("[]", "expected a release name")])
def test_a_releases_entry_that_names_no_release_is_invalid_input(mini, tmp_path, releases, problem):
    target = mini()
    result = launch(recipe_file(tmp_path, releases), target)
    assert result.exit_code == ExitCode.INVALID_INPUT and result.stdout == ""
    assert "mine.yaml" in result.stderr and "releases" in result.stderr and problem in result.stderr


def test_fp8_on_a_series_without_the_fp8_feature_is_refused(mini, tmp_path):
    """Upstream without TE would train BF16 and say nothing: mini_v1 declares no features."""
    target = mini()
    for releases in ("mini_v1", "mini_v2"):  # on a release the recipe lists, and on another
        result = launch(recipe_file(tmp_path, releases), target, "--", "--fp8-format", "hybrid")
        assert result.exit_code == ExitCode.USAGE and result.stdout == "", result.output
        first = result.stderr.splitlines()[0]
        assert first.startswith("rocmpatch: error: --fp8-format: the series of mini_v1 has no fp8"), first
