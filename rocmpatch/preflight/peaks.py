"""Peak dense bf16 matrix throughput per GPU, in TFLOPS, from the vendors' spec sheets (no sparsity).

A GEMM reaches well under this (often 50-70 % on Instinct and Hopper GPUs), which is why the default
threshold against the peak is low; the median of the job's own GPUs is the sharper test.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    label: str
    bf16_tflops: float


# (arch, substring of the device name or "" for any, peak). First match wins, so specific names go first.
PEAKS: tuple[tuple[str, str, Peak], ...] = (
    ("gfx942", "MI325X", Peak("AMD Instinct MI325X", 1307.4)),
    ("gfx942", "MI300A", Peak("AMD Instinct MI300A", 980.6)),
    ("gfx942", "MI308", Peak("AMD Instinct MI308X", 0.0)),  # cut-down export part: no published figure here
    ("gfx942", "", Peak("AMD Instinct MI300X", 1307.4)),
    ("gfx950", "MI350X", Peak("AMD Instinct MI350X", 2306.9)),
    ("gfx950", "", Peak("AMD Instinct MI355X", 2516.6)),
    ("gfx90a", "MI210", Peak("AMD Instinct MI210", 181.0)),
    ("gfx90a", "MI250X", Peak("AMD Instinct MI250X", 383.0)),
    ("gfx90a", "MI250", Peak("AMD Instinct MI250", 362.1)),
    ("gfx1100", "7900 XTX", Peak("AMD Radeon RX 7900 XTX (approx.)", 122.8)),
    ("sm_80", "A100", Peak("NVIDIA A100", 312.0)),
    ("sm_90", "PCIe", Peak("NVIDIA H100 PCIe", 756.5)),
    ("sm_90", "H100", Peak("NVIDIA H100 SXM", 989.4)),
    ("sm_90", "H200", Peak("NVIDIA H200", 989.4)),
    ("sm_100", "B200", Peak("NVIDIA B200", 2250.0)),
)


def peak_for(arch: str, name: str) -> Peak | None:
    """The peak of a GPU given its arch (gfx942, sm_90) and its name, or None when unknown."""
    for peak_arch, fragment, peak in PEAKS:
        if peak_arch == arch and fragment.lower() in name.lower():
            return peak if peak.bf16_tflops > 0 else None
    return None
