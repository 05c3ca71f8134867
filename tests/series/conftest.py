"""Fixtures of the series tests (testkit/harness.py): `release` is the parameter that
harness.releases_with() gives a test (a release's own folder sets it in its conftest.py), and each
tree is built once per session per release."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit import harness


SERIES = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Series tests of a release this session does not test are skipped saying where they run
    (harness.not_run_here: ROCMPATCH_TEST_RELEASES, or CI's default choice)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if not isinstance(params.get("release"), harness.Release) or SERIES not in item.path.parents:
            continue
        reason = harness.not_run_here(params["release"].name, generic=item.path.parent == SERIES,
                                      every_release=item.get_closest_marker("every_release") is not None)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def release(request) -> harness.Release:
    """The release under test: parametrised by harness.releases_with(...)."""
    if not hasattr(request, "param"):
        raise pytest.UsageError(f"{request.node.nodeid}: mark it with harness.releases_with(...) to say which releases it runs for")
    return request.param


@pytest.fixture(scope="session")
def trees(tmp_path_factory) -> harness.Trees:
    return harness.Trees(tmp_path_factory)


@pytest.fixture(scope="session")
def patched_wheel(release, trees) -> Path:
    """megatron/ of the pin from the release's wheel, with the whole series applied."""
    return trees.wheel(release)


@pytest.fixture(scope="session")
def pristine_wheel(release, trees) -> Path:
    """megatron/ of the pin from the release's wheel, as released."""
    return trees.wheel(release, ())


@pytest.fixture(scope="session")
def patched_full(release, trees, upstream_mirror) -> Path:
    """The whole pinned tree of the mirror (ROCMPATCH_TEST_UPSTREAM; skips without) with the series."""
    return trees.full(release, upstream_mirror)


@pytest.fixture(scope="session")
def pristine_full(release, trees, upstream_mirror) -> Path:
    return trees.full(release, upstream_mirror, ())


@pytest.fixture(scope="session")
def training_tree(patched_full) -> Path:
    """patched_full, where pretrain_gpt.py can run on the CPU (harness.needs_training_tools)."""
    harness.needs_training_tools()
    return patched_full


@pytest.fixture(scope="session")
def child_dir(release, tmp_path_factory) -> Path:
    """A working directory for the release's child checks."""
    return tmp_path_factory.mktemp(f"{release.module}-child")


@pytest.fixture(scope="session")
def recorded(training_tree, tmp_path_factory):
    """recorded(*extra): the tiny Llama's two iterations under record_calls.py, each run once per session."""
    from testkit.flags import TINY_LLAMA

    runs: dict[tuple[str, ...], dict] = {}

    def record(*extra: str) -> dict:
        if extra not in runs:
            args = [*TINY_LLAMA, "--train-iters", "2", "--lr-warmup-iters", "1", *extra]
            runs[extra] = harness.recorded_run(training_tree, tmp_path_factory.mktemp("record"), args, 2)
        return runs[extra]

    return record


@pytest.fixture(scope="session")
def fusion_results(release, patched_wheel, child_dir) -> dict:
    """testkit/checks/fusions.py on the patched wheel tree, in one child: the groups of the release's
    features (fusions: torch-fusions, optimizer: fused-adamw). The fused functions run eagerly
    (TORCHDYNAMO_DISABLE=1: the same Python code torch.compile compiles, without minutes of
    compiling on a shared CI machine)."""
    groups = [group for group, feature in (("fusions", "torch-fusions"), ("optimizer", "fused-adamw"))
              if feature in release.features]
    return harness.run_checks("checks.fusions", ",".join(groups), patched_wheel, child_dir, env={"TORCHDYNAMO_DISABLE": "1"})


# testkit/checks/compat.py's groups, by the feature whose tests read them.
COMPAT_GROUPS = {"imports": ("triton-optional",), "args": ("te-fallback", "fusion-fallback", "model-parallel", "cpu-training"),
                 "norm": ("model-parallel",), "config": ("triton-optional", "te-fallback"), "distopt": ("distopt-resume",),
                 "help": ("help-fixed",)}


# testkit/checks/compat.py's groups that import megatron.training: not run on a core-only tree (a test wheel
# with megatron/core only), where the tests that read them skip saying why.
TRAINING_GROUPS = ("args", "help")


class GroupResults(dict):
    """A child's results by group; reading a group that was not run skips the test with its reason."""

    def __init__(self, results: dict, not_run: dict[str, str]):
        super().__init__(results)
        self.not_run = not_run

    def __missing__(self, group: str):
        if group in self.not_run:
            pytest.skip(self.not_run[group])
        raise KeyError(group)


@pytest.fixture(scope="session")
def compat_results(release, patched_wheel, child_dir) -> dict:
    """testkit/checks/compat.py on the patched wheel tree, every group the release's features read, in one child."""
    groups = [group for group, features in COMPAT_GROUPS.items() if set(features) & set(release.features)]
    not_run = {}
    if not (patched_wheel / "megatron" / "training").is_dir():
        not_run = {group: f"{release}: its test wheel has no megatron/training, which testkit/checks/compat.py's {group} "
                          f"group imports (set {harness.MIRROR_VARIABLE} to take it from the mirror)"
                   for group in TRAINING_GROUPS if group in groups}
    groups = [group for group in groups if group not in not_run]
    return GroupResults(harness.run_checks("checks.compat", ",".join(groups), patched_wheel, child_dir), not_run)


@pytest.fixture(scope="session")
def pretrain_validation(release, patched_full, child_dir) -> dict:
    """testkit/checks/compat.py's pretrain group: upstream's own pretrain_gpt.py of the patched full tree
    with default flags, and with an explicit --transformer-impl transformer_engine."""
    return harness.run_checks("checks.compat", "pretrain", patched_full, child_dir)["pretrain"]


@pytest.fixture(scope="session")
def families_results(release, patched_wheel, child_dir) -> dict:
    """testkit/checks/families.py's mla and mtp groups, those the release's features read, in one child."""
    groups = [group for group in ("mla", "mtp") if group in release.features]
    return harness.run_checks("checks.families", ",".join(groups), patched_wheel, child_dir)


@pytest.fixture(scope="session")
def smoke_wheel_report(release, patched_wheel) -> tuple[int, dict]:
    """`rocmpatch smoke --device cpu --json` on the patched wheel tree: exit code, report."""
    return harness.smoke_json(release, patched_wheel)
