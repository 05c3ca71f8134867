"""One rank of the preflight, started by torchrun (or srun torchrun), which sets RANK, WORLD_SIZE,
LOCAL_RANK, GROUP_RANK (the node), MASTER_ADDR and MASTER_PORT.

Every rank times a GEMM; then every node all-reduces inside itself (all nodes at once), then each
pair of neighbouring nodes (i, i+1) all-reduces in turn, then all ranks together. Rank 0 prints the
tables; every rank exits 1 when something is slow, so the launcher reports the failure.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Callable

from rocmpatch.env.facts import gpu_arch
from rocmpatch.preflight.peaks import peak_for
from rocmpatch.preflight.verdict import NodeResult, RankResult, Thresholds, evaluate, format_report


def _positive(kind: type) -> Callable[[str], int | float]:
    """An argparse type: a number above 0 (a zero iteration count or size would divide by zero)."""
    def convert(text: str):
        value = kind(text)
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number above 0")
        return value
    convert.__name__ = kind.__name__
    return convert


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rocmpatch.preflight", description="GEMM and all-reduce preflight; run one process per GPU under torchrun.")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto", help="auto: the GPUs of this torch build, else the CPU (gloo)")
    p.add_argument("--gemm-size", type=_positive(int), help="n of the n x n x n GEMM [8192 on GPUs, 256 on CPU]")
    p.add_argument("--gemm-iters", type=_positive(int), default=10)
    p.add_argument("--size-mb", type=_positive(float), help="all-reduce message size in MiB [256 on GPUs, 1 on CPU]")
    p.add_argument("--iters", type=_positive(int), help="timed all-reduces per measurement [20 on GPUs, 5 on CPU]")
    p.add_argument("--min-of-median", type=float, default=0.5, help="slow: under this share of the median [0.5]")
    p.add_argument("--min-of-peak", type=float, default=0.25, help="slow: GEMM under this share of the GPU's bf16 peak [0.25]")
    p.add_argument("--min-busbw", type=float, help="slow: bus bandwidth under this many GB/s (the only test between 2 nodes)")
    p.add_argument("--json", type=Path, metavar="FILE", help="rank 0 also writes the report as JSON to FILE")
    args = p.parse_args(argv)
    try:
        args.thresholds = Thresholds(args.min_of_median, args.min_of_peak, args.min_busbw)
    except ValueError as error:
        p.error(str(error))
    return args


def _output_problem(path: Path | None) -> str | None:
    """Rank 0's check of --json FILE before anything is measured (a report nobody can write is found now)."""
    if path is None:
        return None
    from rocmpatch.errors import UsageError
    from rocmpatch.files import refuse_unwritable_output

    try:
        refuse_unwritable_output(path, "--json")
    except UsageError as error:
        return str(error)
    return None


def _arch_and_name(torch, device) -> tuple[str, str]:
    if device.type != "cuda":
        return "cpu", "cpu"
    return gpu_arch(torch, device), torch.cuda.get_device_properties(device).name


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("rocmpatch preflight: start it under torchrun, one process per GPU, e.g. "
              "`torchrun --nproc-per-node 8 -m rocmpatch.preflight` (`rocmpatch preflight` prints the launch lines)", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist

    from rocmpatch.preflight.measure import allreduce_busbw, gemm_tflops

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    host = socket.gethostname()
    node = os.environ.get("GROUP_RANK", host)
    use_gpu = args.device == "gpu" or (args.device == "auto" and torch.cuda.is_available())
    if use_gpu and torch.cuda.device_count() == 0:
        print("rocmpatch preflight: --device gpu, but torch sees no GPU here (a CPU-only torch build, or none visible); "
              "use --device cpu, or check HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES", file=sys.stderr)
        return 8  # rocmpatch's ENVIRONMENT code, as `rocmpatch preflight --run` gives it
    if use_gpu:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    # Every rank learns rank 0's verdict on --json FILE, so that all stop together, before any timing.
    problem = [_output_problem(args.json) if rank == 0 else None]
    dist.broadcast_object_list(problem, src=0)
    if problem[0] is not None:
        if rank == 0:
            print(f"rocmpatch preflight: {problem[0]}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    gemm_size = args.gemm_size or (8192 if use_gpu else 256)
    nbytes = int((args.size_mb or (256 if use_gpu else 1)) * (1 << 20))
    iters = args.iters or (20 if use_gpu else 5)

    arch, name = _arch_and_name(torch, device)
    peak = peak_for(arch, name)
    tflops = gemm_tflops(device, torch.bfloat16 if use_gpu else torch.float32, gemm_size, args.gemm_iters)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, (rank, node, host, local_rank, name, arch, tflops, peak.bf16_tflops if peak else None))
    ranks = [RankResult(*entry) for entry in sorted(everyone)]

    node_order: list[str] = []
    for r in ranks:
        if r.node not in node_order:
            node_order.append(r.node)
    members = {n: [r.rank for r in ranks if r.node == n] for n in node_order}
    hosts = {n: next(r.host for r in ranks if r.node == n) for n in node_order}

    intra = None
    for n in node_order:  # every rank creates every group, in the same order
        group = dist.new_group(members[n])
        if n == node and len(members[n]) > 1:
            intra = allreduce_busbw(group, len(members[n]), device, nbytes, iters)
    pairs: list[tuple[str, str, float]] = []
    count = len(node_order)
    pair_list = [(node_order[i], node_order[(i + 1) % count]) for i in range(count if count > 2 else count - 1)]
    for a, b in pair_list:
        group = dist.new_group(members[a] + members[b])
        bw = None
        if node in (a, b):
            bw = allreduce_busbw(group, len(members[a]) + len(members[b]), device, nbytes, iters)
        dist.barrier()
        pairs.append((a, b, bw))
    world_bw = allreduce_busbw(None, world, device, nbytes, iters) if count > 1 else None

    gathered: list = [None] * world
    dist.all_gather_object(gathered, (node, intra, [(a, b, bw) for a, b, bw in pairs if bw is not None]))
    intra_of = {n: bw for n, bw, _ in gathered}
    pair_bw = {(a, b): bw for _, _, ps in gathered for a, b, bw in ps}
    pairs_done = [(a, b, pair_bw[(a, b)]) for a, b in pair_list]
    nodes = [NodeResult(n, hosts[n], len(members[n]), intra_of[n],
                        max((bw for a, b, bw in pairs_done if n in (a, b)), default=None)) for n in node_order]
    verdict = evaluate(ranks, nodes, pairs_done, world_bw, args.thresholds)
    if rank == 0:
        print(format_report(verdict), flush=True)
        if args.json:
            args.json.write_text(json.dumps(verdict.to_json(), indent=2) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if verdict.ok else 1
