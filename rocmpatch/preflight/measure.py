"""The timings: a square GEMM's TFLOPS and an all-reduce's bus bandwidth as nccl-tests defines it."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from rocmpatch.preflight.verdict import bus_bandwidth


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_tflops(device: torch.device, dtype: torch.dtype, n: int, iters: int, warmup: int = 3) -> float:
    """2*n^3 floating point operations per n x n x n product, averaged over `iters` products."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(warmup):
        torch.matmul(a, b)
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        torch.matmul(a, b)
    _sync(device)
    seconds = (time.perf_counter() - start) / iters
    return 2.0 * n**3 / seconds / 1e12


def allreduce_busbw(group, ranks: int, device: torch.device, nbytes: int, iters: int, warmup: int = 2) -> float:
    """All-reduce `nbytes` of float32 in `group` `iters` times; every member returns the same busbw (the slowest rank's time)."""
    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    _sync(device)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    _sync(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return bus_bandwidth(tensor.numel() * 4, float(elapsed.item()), ranks)
