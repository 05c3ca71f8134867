"""triton-optional: megatron.core imports without triton (patches triton-optional, typing-override);
the pin as released does not. CI: the wheel's megatron/, pristine and patched, in child processes
(testkit/checks/compat.py) with every NVIDIA-only package, triton included, refused as absent."""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("triton-optional")


@pytest.fixture(scope="session")
def pristine_imports(pristine_wheel, child_dir) -> dict:
    return harness.run_checks("checks.compat", "imports", pristine_wheel, child_dir)["imports"]


def test_pristine_pin_does_not_import_without_triton_or_on_python_3_11(pristine_imports):
    assert "No module named 'triton'" in pristine_imports["megatron.core"]
    if tuple(pristine_imports["python"]) < (3, 12):
        assert "cannot import name 'override' from 'typing'" in pristine_imports["megatron.training"]


@pytest.mark.every_release
def test_patched_tree_imports(compat_results):
    imports = compat_results["imports"]
    assert not imports["stubbed_paged_stash"]
    modules = [name for name in imports if name.startswith("megatron.")]
    assert {"megatron.core", "megatron.training", "megatron.training.arguments"} <= set(modules), imports
    assert any(name.startswith("megatron.training.models.") for name in modules), imports  # where override is used
    for name in modules:
        assert imports[name] is None, (name, imports[name])


@pytest.mark.every_release
def test_paged_stash_without_triton_is_refused_naming_the_flag(compat_results):
    assert compat_results["config"]["paged_stash"].startswith("ValueError: moe_paged_stash needs triton")
    assert "--moe-paged-stash" in compat_results["config"]["paged_stash"]
