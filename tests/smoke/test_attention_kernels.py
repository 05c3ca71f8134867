"""smoke's attention-kernel check (op_checks.core-attention-kernels): the shapes it forces onto the flash
and memory-efficient kernels are every recipe's, and a fall to the math path fails with PyTorch's reason
and the variable to set. The check itself runs in tests/series/test_smoke.py (CPU, for every release
whose smoke profile lists it)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace


from rocmpatch.recipes.catalog import names
from rocmpatch.smoke.op_checks import RECIPE_ATTENTION_SHAPES, ROCM_EXPERIMENTAL_ATTENTION, _no_fused_kernel


def test_the_shapes_are_derived_from_every_recipe_layout():
    """Derived (rocmpatch.megatron_args.AttentionShape per layout), deduplicated: llama3-8b-32k's
    CP 4 gives each GPU llama3-8b's 8192 tokens; llama3-70b's TP 8 one query group per GPU."""
    assert {shape[1:] for shape in RECIPE_ATTENTION_SHAPES} == {
        (32, 8, 128, 8192), (32, 8, 128, 4096), (8, 1, 128, 8192), (16, 4, 64, 2048), (32, 4, 128, 4096), (16, 16, 192, 4096, 128)}
    labels = [shape[0] for shape in RECIPE_ATTENTION_SHAPES]
    assert "llama3-70b at TP 8" in labels and len(labels) == len(set(labels))
    assert {label.split(" ")[0] for label in labels} <= set(names())


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
