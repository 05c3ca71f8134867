"""gpu_arch: which field names a GPU's architecture on each torch build."""

from __future__ import annotations

from types import SimpleNamespace

from rocmpatch.env.facts import gpu_arch


def fake_torch(hip: str | None, **props) -> SimpleNamespace:
    return SimpleNamespace(version=SimpleNamespace(hip=hip, cuda=None if hip else "13.0"),
                           cuda=SimpleNamespace(get_device_properties=lambda device: SimpleNamespace(**props)))


def test_cuda_build_reads_compute_capability_even_with_a_gcn_arch_name():
    # CUDA torch 2.11 fills gcnArchName with the device's name (seen on an H100): it is no architecture.
    torch = fake_torch(None, gcnArchName="NVIDIA H100 80GB HBM3", major=9, minor=0, name="NVIDIA H100 80GB HBM3")
    assert gpu_arch(torch, 0) == "sm_90"


def test_rocm_build_reads_gcn_arch_name_without_feature_flags():
    torch = fake_torch("6.4", gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4, name="AMD Instinct MI300X")
    assert gpu_arch(torch, 0) == "gfx942"


def test_rocm_build_without_gcn_arch_name_is_unknown():
    assert gpu_arch(fake_torch("6.4", major=9, minor=4, name="?"), 0) == "unknown"
