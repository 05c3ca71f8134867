"""A machine described as plain facts: the torch build, each GPU's architecture, and a filesystem root.

`probe()` reads the real machine; tests build a `Machine` by hand (a fake sysfs under a tmp dir).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str  # as torch reports it: "AMD Instinct MI300X", "NVIDIA H100 80GB HBM3"
    arch: str  # gcnArchName without feature flags ("gfx942"), or "sm_90" for CUDA GPUs
    memory_bytes: int = 0


@dataclass(frozen=True)
class Machine:
    torch_version: str | None = None  # None: torch is not installed
    hip_version: str | None = None  # set on a ROCm build of torch
    cuda_version: str | None = None  # set on a CUDA build of torch
    gpus: tuple[Gpu, ...] = ()
    root: Path = Path("/")  # where sys/class/net, sys/class/infiniband and proc/net/route are read
    environ: dict[str, str] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        """'none' (no torch), 'rocm', 'cuda' or 'cpu' (a torch build without GPU support)."""
        if self.torch_version is None:
            return "none"
        if self.hip_version:
            return "rocm"
        if self.cuda_version:
            return "cuda"
        return "cpu"

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(sorted({gpu.arch for gpu in self.gpus}))


def base_arch(gcn_arch_name: str) -> str:
    """'gfx942:sramecc+:xnack-' -> 'gfx942'."""
    return gcn_arch_name.split(":", 1)[0].strip()


def gpu_arch(torch, device) -> str:
    """A GPU's architecture: gcnArchName's base on ROCm ("gfx942"), "sm_90" on CUDA. CUDA builds of
    torch have a gcnArchName too, holding the device's name (seen on torch 2.11 with an H100), so the
    build decides which field is read."""
    props = torch.cuda.get_device_properties(device)
    if getattr(torch.version, "hip", None):
        return base_arch(getattr(props, "gcnArchName", "") or "unknown")
    return f"sm_{props.major}{props.minor}"


def probe(root: Path = Path("/"), environ: dict[str, str] | None = None) -> Machine:
    """The real machine: torch imported if it can be (never required), GPUs as this process sees them."""
    environ = dict(os.environ if environ is None else environ)
    try:
        import torch
    except ImportError:
        return Machine(root=root, environ=environ)
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    gpus: list[Gpu] = []
    if (hip or cuda) and torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(Gpu(index, props.name, gpu_arch(torch, index), int(props.total_memory)))
    return Machine(torch_version=torch.__version__, hip_version=hip, cuda_version=cuda if not hip else None,
                   gpus=tuple(gpus), root=root, environ=environ)
