from __future__ import annotations

from pathlib import Path

from rocmpatch import launchers
from rocmpatch.console import note, out
from rocmpatch.errors import EnvironmentProblem, ExitCode, UsageError
from rocmpatch.files import refuse_unwritable_output
from rocmpatch.preflight.verdict import Thresholds


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


def _refuse_bad_thresholds(min_of_median: float | None, min_of_peak: float | None, min_busbw: float | None) -> None:
    defaults = Thresholds()
    try:
        Thresholds(defaults.min_of_median if min_of_median is None else min_of_median,
                   defaults.min_of_peak if min_of_peak is None else min_of_peak, min_busbw)
    except ValueError as error:
        raise UsageError(str(error), hint="'rocmpatch preflight --help' says what each threshold means") from None


def run(*, gpus: int | None, nodes: int, slurm: bool, launch: bool, device: str,
        min_of_median: float | None, min_of_peak: float | None, min_busbw: float | None, json_file: Path | None = None) -> ExitCode:
    _refuse_bad_thresholds(min_of_median, min_of_peak, min_busbw)
    program = worker_args(device=device, min_of_median=min_of_median, min_of_peak=min_of_peak, min_busbw=min_busbw, json_file=json_file)
    if not launch:
        line = launchers.torchrun(program, nproc=gpus or 8, nodes=nodes, slurm=slurm, job="rocmpatch-preflight")
        out.print("\n".join(line.lines()), markup=False)
        return ExitCode.OK
    if nodes != 1 or slurm:
        raise UsageError("--run starts the preflight on this node only", hint="drop --nodes/--slurm, or run the printed line on every node")
    if json_file is not None:
        refuse_unwritable_output(json_file, "--json")  # rank 0 writes it at the end: find out now
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("torch is not installed", hint="install the ROCm (or CUDA) build of PyTorch") from None
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "gpu" and visible == 0:
        raise EnvironmentProblem("--device gpu, but torch sees no GPU here (a CPU-only torch build, or none visible)",
                                 hint="use --device cpu, or check HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES")
    count = gpus or (visible if device != "cpu" and visible else 2)
    started = launchers.torchrun(program, nproc=count, launcher=launchers.THIS_PYTHON)
    note(f"running: {started.line()}")
    return ExitCode.OK if launchers.run(started) == 0 else ExitCode.CHECK_FAILED
