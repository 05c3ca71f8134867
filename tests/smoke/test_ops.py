"""The ops stage's verdict on one case (rocmpatch/smoke/ops.py run_case), without a Megatron tree."""

from __future__ import annotations

import pytest

from rocmpatch.smoke.op_checks import Check, NotOnThisDevice
from rocmpatch.smoke.ops import run_case

torch = pytest.importorskip("torch")


def test_a_check_the_device_cannot_run_is_skipped_saying_why():
    """core-fp8-gemm on gfx90a: no FP8 GEMM there is the device's limit, not a broken replacement."""
    def run(torch, device, dtype):
        raise NotOnThisDevice("FP8 is not available: gfx90a has no FP8 GEMM")

    case = run_case(torch, Check("FP8 GEMM (tensorwise, hybrid)", "megatron/core/extensions/torch_fp8.py", run),
                    torch.device("cpu"), "bfloat16", "cuda", "unused")
    assert (case.status, case.detail) == ("skipped", "FP8 is not available: gfx90a has no FP8 GEMM")
