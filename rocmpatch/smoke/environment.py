"""Stage 1, environment: which torch build, which devices, and how later stages select them.

Runs before anything of the target is imported. Its result carries `platform` (rocm, cuda or cpu) and
`selection` (the variables every later child gets), which the runner passes on.
"""

from __future__ import annotations

import os
import platform as host
from typing import Any

from rocmpatch.env.facts import gpu_arch
from rocmpatch.smoke import devices
from rocmpatch.smoke.child import SLOW_FIRST_IMPORT, StageFailure, stage_main, step


def torch_build(torch) -> tuple[str, str]:
    """('rocm', 'HIP 6.2...') / ('cuda', 'CUDA 12.4') / ('cpu', 'CPU only') from the build, no GPU touched."""
    if getattr(torch.version, "hip", None):
        return "rocm", f"HIP {torch.version.hip}"
    if getattr(torch.version, "cuda", None):
        return "cuda", f"CUDA {torch.version.cuda}"
    return "cpu", "CPU only"


def choose_platform(requested: str, build: str, gpu_count: int, torch_version: str) -> tuple[str, list[str]]:
    """The platform to run on for --device `requested`, or StageFailure saying what to do."""
    notes: list[str] = []
    if requested == "cpu":
        return "cpu", notes
    if requested == "rocm" and build != "rocm":
        what = "a CUDA build" if build == "cuda" else "a CPU-only build"
        raise StageFailure(f"--device rocm, but torch {torch_version} is {what}; {devices.ROCM_INSTALL}")
    if requested == "cuda" and build != "cuda":
        if build == "rocm":
            raise StageFailure(f"--device cuda, but torch {torch_version} is a ROCm build; "
                               "use --device rocm (or auto)")
        raise StageFailure(f"--device cuda, but torch {torch_version} is a CPU-only build; {devices.CUDA_INSTALL}")
    if build == "cpu":  # auto on a CPU-only build
        notes.append(f"torch {torch_version} is CPU-only: running on CPU; for AMD GPUs {devices.ROCM_INSTALL}")
        return "cpu", notes
    if gpu_count == 0:
        tool = "rocm-smi (and membership of the video and render groups)" if build == "rocm" else "nvidia-smi"
        selecting = [f"{k}={os.environ[k]}" for k in
                     ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if k in os.environ]
        message = (f"no GPU visible to torch {torch_version} ({build} build): check the driver with {tool}"
                   + (f" and the selection {' '.join(selecting)}" if selecting else ""))
        if requested == "auto":
            notes.append(message + "; running on CPU")
            return "cpu", notes
        raise StageFailure(message + "; or use --device cpu")
    return build, notes


def describe_gpu(torch, index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    info = {"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1)}
    info["arch"] = gpu_arch(torch, index)
    return info


def collective_library(torch, platform: str) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a build without NCCL/RCCL
        return None
    text = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    return f"{'RCCL' if platform == 'rocm' else 'NCCL'} {text}"


def run(config: dict[str, Any]) -> dict[str, Any]:
    step(f"importing torch ({SLOW_FIRST_IMPORT})")
    import torch

    step(f"torch {torch.__version__} imported; counting GPUs")

    build, build_text = torch_build(torch)
    gpu_count = torch.cuda.device_count() if build != "cpu" else 0
    platform, notes = choose_platform(config.get("device", "auto"), build, gpu_count, torch.__version__)
    gpus = config.get("gpus")
    try:
        selection = devices.select(platform, gpus, gpu_count, os.environ)
    except ValueError as error:
        raise StageFailure(str(error)) from None
    notes += selection.notes
    result: dict[str, Any] = {
        "platform": platform, "torch": torch.__version__, "build": build_text,
        "python": host.python_version(), "selection": selection.to_json(), "notes": notes,
    }
    if platform == "cpu":
        if gpus:
            hint = ("--device cpu runs every stage on the CPU: drop --gpus, or drop --device cpu to use GPUs"
                    if config.get("device") == "cpu" else
                    f"drop --gpus to run every stage on the CPU; torch sees no GPU here ({'; '.join(notes)})")
            raise StageFailure(f"--gpus {','.join(map(str, gpus))} given, but running on CPU", hint=hint)
        result["devices"] = []
        result["world_size"] = 2  # collectives run gloo over two processes
        result["detail"] = f"torch {torch.__version__} ({build_text}); running on CPU"
    else:
        indices = gpus if gpus is not None else list(range(gpu_count))
        result["devices"] = [describe_gpu(torch, i) for i in indices]
        result["world_size"] = len(indices)
        result["collectives"] = collective_library(torch, platform)
        names = sorted({d["name"] for d in result["devices"]})
        chosen = "; ".join(f"{k}={v}" for k, v in selection.set.items()) or "all visible"
        result["detail"] = (f"torch {torch.__version__} ({build_text}), {len(indices)} GPU(s): "
                            f"{', '.join(names)} [{result['devices'][0]['arch']}]; "
                            f"{result['collectives'] or 'no NCCL/RCCL'}; selected with {chosen}")
    if notes:
        result["detail"] += " (" + "; ".join(notes) + ")"
    return result


if __name__ == "__main__":
    stage_main(run)
