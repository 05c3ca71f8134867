from __future__ import annotations

from pathlib import Path

from rocmpatch import launchers
from rocmpatch.console import note, out
from rocmpatch.errors import EnvironmentProblem, ExitCode, UsageError
from rocmpatch.files import refuse_unwritable_output
from rocmpatch.preflight.verdict import Thresholds


CPU_PROCESSES = 2  # without GPUs the preflight runs on the CPU over gloo: two processes test the all-reduce
NODE_GPUS = 8  # a launch line for other nodes, printed where torch sees no GPU (a login node)


def _gpus_here(device: str) -> int:
    """The GPUs torch sees on this machine (0 with --device cpu, without torch, or without a GPU)."""
    return 0 if device == "cpu" else launchers.visible_gpus() or 0


def _printed_count(device: str, nodes: int, slurm: bool) -> int:
    """--nproc-per-node for the printed line when --gpus-per-node is not given: this machine's GPUs;
    without any, what --run would start here (one node), or 8 GPUs per node (for other machines)."""
    count = _gpus_here(device)
    if count:
        return count
    if nodes == 1 and not slurm:
        note(f"no GPU {'asked for' if device == 'cpu' else 'visible to torch here'}: {CPU_PROCESSES} processes on the CPU over gloo, "
             "as --run would start (--gpus-per-node N for a node with N GPUs)")
        return CPU_PROCESSES
    note(f"no GPU visible to torch here: --nproc-per-node {NODE_GPUS} for the nodes it runs on (--gpus-per-node N to say how many they have)")
    return NODE_GPUS


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
        line = launchers.torchrun(program, nproc=gpus or _printed_count(device, nodes, slurm), nodes=nodes, slurm=slurm, job="rocmpatch-preflight")
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
    count = gpus or (visible if device != "cpu" and visible else CPU_PROCESSES)
    started = launchers.torchrun(program, nproc=count, launcher=launchers.THIS_PYTHON)
    note(f"running: {started.line()}")
    return ExitCode.OK if launchers.run(started) == 0 else ExitCode.CHECK_FAILED
