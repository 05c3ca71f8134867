"""Stage 3, ops: the torch-native replacements of the series, on the device, against an fp32 reference.

Each check the release's smoke profile lists (op_checks.py) builds the module the way Megatron does,
with fusion requested (so a tree without the series reaches for the *_cuda extension and fails
here), runs forward and backward in each dtype and compares with a plain fp32 computation. Errors
are max|out - ref| / max|ref|; the stage reports the worst. Only listed checks whose module exists in
the target run (a core-only tree has no megatron/model).
On CPU a case that reaches upstream code hard-wired to 'cuda' (a tree without the series' cpu-training
patch) is skipped and named, not failed: the train stage reports that tree's CPU training.
"""

from __future__ import annotations

import math
import os
import socket
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmpatch.smoke.child import (
    CUDA_ONLY_MESSAGES, describe, in_target, put_target_first, stage_main, step, target_files, target_root,
)
from rocmpatch.smoke.op_checks import Check, NotOnThisDevice, OutOfTolerance, checks
from rocmpatch.smoke.profile import SmokeProfile

# Normalized max error allowed per dtype (fp32: accumulation order; 16-bit: one rounding of the output).
TOLERANCE = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


@dataclass
class Case:
    check: str
    dtype: str
    status: str  # passed | failed | skipped
    error: float | None = None  # worst of forward and backward
    tolerance: float | None = None
    detail: str = ""
    culprits: tuple[str, ...] = ()
    missing_module: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"check": self.check, "dtype": self.dtype, "status": self.status, "detail": self.detail}
        if self.error is not None:
            data.update(error=float(f"{self.error:.3g}"), tolerance=self.tolerance)
        return data


def normalized_error(out, ref) -> float:
    out, ref = out.detach().float(), ref.detach().float()
    if not bool(out.isfinite().all()):
        return math.inf
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def worst(pairs) -> tuple[float, str]:
    """max error over (name, out, ref) triples, with the name of the worst one."""
    errors = [(normalized_error(out, ref), name) for name, out, ref in pairs]
    return max(errors)


def unsupported_here(exc: BaseException, target: str) -> str | None:
    """Why a failure on CPU is upstream's CUDA-only code rather than a broken replacement, or None."""
    text = str(exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    last = frames[-1] if frames else None
    root = target_root(target)
    inside = [f for f in frames if in_target(f.filename, root) is not None]
    spot = inside[-1] if inside else last
    where = (f"{os.path.relpath(os.path.realpath(spot.filename), root)}:{spot.lineno}" if spot else "?")
    if any(message in text for message in CUDA_ONLY_MESSAGES):
        return f"needs a GPU ({where}: {text.splitlines()[0][:80]})"
    if isinstance(exc, AssertionError) and last is not None and "cuda" in (last.line or ""):
        return f"needs a GPU ({where}: {last.line.strip()[:80]})"
    return None


def not_provided(exc: BaseException) -> bool:
    """RMSNorm requested from a FusedLayerNorm that only does LayerNorm: the tree lacks it, not broken."""
    return "is not supported in FusedLayerNorm" in str(exc)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def single_process_model_parallel(torch, platform: str) -> None:
    """A world of one with Megatron's groups (TP=PP=CP=1) and seeded RNG tracker, as the ops see it in
    training: some ask parallel_state about their groups as soon as torch.distributed is initialized."""
    backend = "gloo" if platform == "cpu" else "nccl"
    torch.distributed.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}",
                                         world_size=1, rank=0)
    from megatron.core import parallel_state, tensor_parallel

    parallel_state.initialize_model_parallel(1, 1)
    # Training seeds the model-parallel RNG tracker right after the groups (initialize's _set_random_seed);
    # a tensor-parallel layer built on a GPU forks it to initialize its weights.
    tensor_parallel.model_parallel_cuda_manual_seed(1234)


def run_case(torch, check: Check, device, dtype_name: str, platform: str, target: str) -> Case:
    dtype = getattr(torch, dtype_name)
    tolerance = TOLERANCE[dtype_name]
    try:
        error, what = worst(check.run(torch, device, dtype))
    except BaseException as exc:  # noqa: BLE001 - each case reports on its own
        if isinstance(exc, OutOfTolerance):
            return Case(check.name, dtype_name, "failed", detail=str(exc), culprits=(check.module_path,))
        if isinstance(exc, NotOnThisDevice):
            return Case(check.name, dtype_name, "skipped", detail=str(exc))
        if platform == "cpu" and (reason := unsupported_here(exc, target)):
            return Case(check.name, dtype_name, "skipped", detail=reason)
        if not_provided(exc):
            return Case(check.name, dtype_name, "skipped", detail="not provided by this tree")
        culprits = tuple(target_files(exc.__traceback__, target)) or (check.module_path,)
        missing = exc.name if isinstance(exc, ImportError) else None
        return Case(check.name, dtype_name, "failed", detail=describe(exc), culprits=culprits,
                    missing_module=missing)
    if error <= tolerance:
        return Case(check.name, dtype_name, "passed", error, tolerance, f"worst: {what}")
    return Case(check.name, dtype_name, "failed", error, tolerance,
                f"{what} error {error:.3g} > tolerance {tolerance:g}", culprits=(check.module_path,))


def supported_dtypes(torch, platform: str) -> set[str]:
    names = {"float32", "float16"}
    if platform == "cpu" or torch.cuda.is_bf16_supported():
        names.add("bfloat16")
    return names


def run(config: dict[str, Any]) -> dict[str, Any]:
    target = config["target"]
    put_target_first(target)
    step("importing torch")
    import torch

    from rocmpatch.smoke.child import is_nvidia_only

    platform = config.get("platform") or "cpu"
    if platform == "cpu":
        device = torch.device("cpu")
    else:
        if torch.cuda.device_count() < 1:
            return {"status": "failed", "detail": "no GPU visible in the ops child: the selection "
                    f"{os.environ.get('HIP_VISIBLE_DEVICES') or os.environ.get('CUDA_VISIBLE_DEVICES')} hid them all"}
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    torch.manual_seed(0)
    profile = SmokeProfile.from_config(config["profile"])
    available = [c for c in checks(profile.ops) if (Path(target) / c.module_path).is_file()]
    single_process_model_parallel(torch, platform)
    dtypes = supported_dtypes(torch, platform)
    cases = []
    for check in available:
        step(f"{check.name} on {device}")
        cases += [run_case(torch, check, device, dtype, platform, target) for dtype in check.dtypes if dtype in dtypes]
    if platform != "cpu":
        torch.cuda.synchronize()
    failed = [c for c in cases if c.status == "failed"]
    passed = [c for c in cases if c.status == "passed"]
    skipped = [c for c in cases if c.status == "skipped"]
    result: dict[str, Any] = {"device": str(device), "cases": [c.to_json() for c in cases]}
    measured = [c for c in passed if c.error is not None]
    if measured:
        top = max(measured, key=lambda c: c.error / c.tolerance)
        result["worst"] = {"check": top.check, "dtype": top.dtype, "error": top.error, "tolerance": top.tolerance}
    skipped_text = ""
    if skipped:
        names = sorted({f"{c.check}: {c.detail}" for c in skipped})
        skipped_text = f"; {len(skipped)} skipped ({'; '.join(names[:3])}{'; ...' if len(names) > 3 else ''})"
    if failed:
        first = failed[0]
        result.update(status="failed", culprits=list(first.culprits), missing_module=first.missing_module,
                      nvidia_only=bool(first.missing_module and is_nvidia_only(first.missing_module)),
                      detail=f"{first.check} {first.dtype}: {first.detail}"
                             + (f"; {len(failed) - 1} more case(s) failed" if len(failed) > 1 else ""))
        return result
    if not passed:
        result.update(status="failed", detail="no op check could run here" + skipped_text)
        return result
    worst_text = ""
    if measured:
        w = result["worst"]
        worst_text = f", worst {w['check']} {w['dtype']} {w['error']:.2g} (tolerance {w['tolerance']:g})"
    result["detail"] = f"{len(passed)} cases passed on {device}{worst_text}{skipped_text}"
    return result


if __name__ == "__main__":
    stage_main(run)
