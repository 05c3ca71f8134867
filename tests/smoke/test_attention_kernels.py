"""smoke's attention-kernel check (op_checks.core-attention-kernels): the shapes it forces onto the flash
and memory-efficient kernels cover every recipe, and a fall to the math path fails with PyTorch's reason
and the variable to set. The check itself runs in tests/series/test_smoke.py (CPU, for every release
whose smoke profile lists it)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from rocmpatch.recipes.catalog import find, names
from rocmpatch.smoke.op_checks import RECIPE_ATTENTION_SHAPES, ROCM_EXPERIMENTAL_ATTENTION, _no_fused_kernel


@pytest.mark.parametrize("name", names())
def test_every_recipe_layout_has_its_attention_shape_checked(name):
    recipe = find(name)
    covered = {shape[1:] for shape in RECIPE_ATTENTION_SHAPES}
    for layout in recipe.layouts:
        args = recipe.merged_args(layout)
        tp = int(args.get("--tensor-model-parallel-size", 1))
        heads = int(args["--num-attention-heads"])
        groups = int(args.get("--num-query-groups", heads))
        cp = int(args.get("--context-parallel-size", 1))  # each GPU's blocks: its s/CP queries
        head_dim = int(args.get("--kv-channels", int(args["--hidden-size"]) // heads))
        shape = (heads // tp, groups // tp, head_dim, int(args["--seq-length"]) // cp)
        if args.get("--multi-latent-attention"):  # query/key heads of qk + RoPE dims, value heads apart
            qk = int(args.get("--qk-head-dim", 128)) + int(args.get("--qk-pos-emb-head-dim", 64))
            shape = (heads // tp, heads // tp, qk, int(args["--seq-length"]) // cp, int(args.get("--v-head-dim", 128)))
        assert shape in covered, (name, layout.name, shape)


def fake_torch(hip: str | None, arch: str = "gfx1100"):
    return SimpleNamespace(version=SimpleNamespace(hip=hip),
                           cuda=SimpleNamespace(get_device_properties=lambda device: SimpleNamespace(gcnArchName=arch)))


def caught_warnings(*messages):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for message in messages:
            warnings.warn(message)
    return caught


def test_no_fused_kernel_on_rocm_names_the_reason_and_the_variable(monkeypatch):
    monkeypatch.delenv(ROCM_EXPERIMENTAL_ATTENTION, raising=False)
    caught = caught_warnings("Flash attention kernel not used because:",
                             "Flash Efficient attention on Current AMD GPU is still experimental. Enable it with "
                             "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.")
    detail = _no_fused_kernel(fake_torch("6.4"), RuntimeError("No available kernel. Aborting execution."), caught,
                              SimpleNamespace(type="cuda"), "small-radeon (16 heads)")
    assert detail.startswith("SDPA has no flash or memory-efficient kernel for small-radeon (16 heads): Flash Efficient")
    assert f"On gfx1100 AOTriton's attention kernels may be experimental: export {ROCM_EXPERIMENTAL_ATTENTION}=1" in detail
    assert "math path" in detail


def test_no_fused_kernel_on_cuda_gives_pytorchs_reason_only(monkeypatch):
    caught = caught_warnings("Flash attention only supports gpu architectures in the range [sm80, sm121].")
    detail = _no_fused_kernel(fake_torch(None), RuntimeError("No available kernel."), caught, SimpleNamespace(type="cuda"), "x")
    assert "sm80, sm121" in detail and ROCM_EXPERIMENTAL_ATTENTION not in detail
