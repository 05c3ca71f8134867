from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rocmpatch.console import note, out
from rocmpatch.errors import EnvironmentProblem, ExitCode, UsageError
from rocmpatch.launchers import preamble, render, torchrun


def worker_args(*, device: str, min_of_median: float | None, min_of_peak: float | None, min_busbw: float | None,
                json_file: Path | None = None) -> list[str]:
    args = ["-m", "rocmpatch.preflight"]
    if device != "auto":
        args += ["--device", device]
    for flag, value in (("--min-of-median", min_of_median), ("--min-of-peak", min_of_peak), ("--min-busbw", min_busbw)):
        if value is not None:
            args += [flag, f"{value:g}"]
    if json_file is not None:
        args += ["--json", str(json_file)]
    return args


def run(*, gpus: int | None, nodes: int, slurm: bool, launch: bool, device: str,
        min_of_median: float | None, min_of_peak: float | None, min_busbw: float | None, json_file: Path | None = None) -> ExitCode:
    tail = worker_args(device=device, min_of_median=min_of_median, min_of_peak=min_of_peak, min_busbw=min_busbw, json_file=json_file)
    if not launch:
        lines = preamble(nodes, slurm=slurm) + [render(torchrun(gpus or 8, nodes, slurm=slurm, job="rocmpatch-preflight") + tail)]
        out.print("\n".join(lines), markup=False)
        return ExitCode.OK
    if nodes != 1 or slurm:
        raise UsageError("--run starts the preflight on this node only", hint="drop --nodes/--slurm, or run the printed line on every node")
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("torch is not installed", hint="install the ROCm (or CUDA) build of PyTorch") from None
    count = gpus or (torch.cuda.device_count() if device != "cpu" and torch.cuda.is_available() else 2)
    if count < 1:
        raise UsageError("--gpus-per-node must be at least 1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(count), *tail]
    note(f"running: {render(['torchrun', *argv[3:]])}")
    done = subprocess.run(argv)
    return ExitCode.OK if done.returncode == 0 else ExitCode.CHECK_FAILED
