"""One torchrun worker of the collectives stage (`python -m rocmpatch.smoke.collectives_worker CONFIG`):
all_reduce, all_gather, reduce_scatter and broadcast checked exactly, then a large all_reduce's bus
bandwidth; rank 0 prints the result line. Imports what it runs only (child's result helpers, processes),
nothing of the stage that launched it."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from typing import Any

from rocmpatch.processes import die_with_parent
from rocmpatch.smoke.child import StageFailure, describe


def check_equal(torch, name: str, got, expected, notes: list[str]) -> None:
    if not torch.equal(got.cpu(), expected.cpu()):
        bad = (got.cpu() != expected.cpu()).nonzero()
        first = tuple(bad[0].tolist()) if len(bad) else ()
        raise StageFailure(f"{name} gave wrong values: at {first} got {got.cpu()[first].item()}, "
                           f"expected {expected.cpu()[first].item()}", notes=notes)


def collectives(torch, dist, device, rank: int, world: int, notes: list[str]) -> None:
    n = 1024
    value = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(value)
    check_equal(torch, "all_reduce", value, torch.full((n,), float(world * (world + 1) // 2)), notes)

    mine = torch.arange(n, dtype=torch.float32, device=device) + rank * n
    gathered = torch.empty(world * n, device=device)
    try:
        dist.all_gather_into_tensor(gathered, mine)
    except (RuntimeError, NotImplementedError, ValueError):  # older gloo: list form only
        parts = [torch.empty(n, device=device) for _ in range(world)]
        dist.all_gather(parts, mine)
        gathered = torch.cat(parts)
        notes.append("all_gather_into_tensor unsupported by this backend: used all_gather")
    check_equal(torch, "all_gather", gathered, torch.arange(world * n, dtype=torch.float32), notes)

    full = torch.arange(world * n, dtype=torch.float32, device=device) * (rank + 1)
    out = torch.empty(n, device=device)
    try:
        dist.reduce_scatter_tensor(out, full)
    except (RuntimeError, NotImplementedError, ValueError):
        # gloo has no reduce_scatter on some versions: emulate so the stage still checks the rest.
        summed = full.clone()
        dist.all_reduce(summed)
        out = summed[rank * n:(rank + 1) * n]
        notes.append(f"reduce_scatter unsupported by {dist.get_backend()}: emulated with all_reduce")
    factor = world * (world + 1) // 2
    check_equal(torch, "reduce_scatter", out, torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32) * factor,
                notes)

    data = torch.full((n,), 42.0 if rank == 0 else -1.0, device=device)
    dist.broadcast(data, src=0)
    check_equal(torch, "broadcast", data, torch.full((n,), 42.0), notes)


def bus_bandwidth(torch, dist, device, world: int, gpu: bool) -> dict[str, Any]:
    size_bytes = (256 if gpu else 4) * 2**20
    tensor = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    iterations = 20 if gpu else 5

    def sync():
        if gpu:
            torch.cuda.synchronize()

    for _ in range(3):
        dist.all_reduce(tensor)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    sync()
    seconds = (time.perf_counter() - start) / iterations
    algbw = size_bytes / seconds / 1e9
    return {"bytes": size_bytes, "seconds_per_op": seconds, "algbw_gb_s": round(algbw, 2),
            "busbw_gb_s": round(algbw * 2 * (world - 1) / world, 2) if world > 1 else None}


def worker(config: dict[str, Any]) -> None:
    die_with_parent()
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpu = config.get("platform") in ("rocm", "cuda")
    if gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    backend = "nccl" if gpu else "gloo"
    notes: list[str] = []
    result: dict[str, Any]
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
        collectives(torch, dist, device, rank, world, notes)
        bandwidth = bus_bandwidth(torch, dist, device, world, gpu)
        library = "RCCL" if getattr(torch.version, "hip", None) and gpu else backend.upper() if gpu else "gloo"
        busbw = (f"bus bandwidth {bandwidth['busbw_gb_s']} GB/s" if bandwidth["busbw_gb_s"] is not None
                 else f"one process: no bus traffic ({bandwidth['algbw_gb_s']} GB/s local)")
        result = {"status": "passed", "backend": backend, "world_size": world, "bandwidth": bandwidth,
                  "notes": notes,
                  "detail": f"{library} x{world}: all_reduce, all_gather, reduce_scatter, broadcast exact; "
                            f"{bandwidth['bytes'] // 2**20} MiB all_reduce {busbw}"
                            + (f" ({'; '.join(notes)})" if notes else "")}
    except StageFailure as failure:
        result = {"status": "failed", "detail": f"rank {rank}: {failure.detail}", **failure.extra}
    except Exception as exc:  # noqa: BLE001 - report the rank's error rather than a bare torchrun failure
        result = {"status": "failed", "detail": f"rank {rank}: {describe(exc)}"}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0 or result["status"] == "failed":
        sys.stdout.write("\n" + json.dumps(result) + "\n")
        sys.stdout.flush()
    if result["status"] == "failed":
        sys.exit(1)


if __name__ == "__main__":
    worker(json.loads(sys.argv[1]))
