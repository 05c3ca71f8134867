"""Stage 4, collectives: all_reduce, all_gather, reduce_scatter and broadcast across the workers.

The stage child launches torchrun with one worker per selected GPU, backend nccl (which is RCCL on
ROCm builds of torch), or two CPU workers with gloo. Values are small integers in fp32, so every
result is checked exactly. A large all_reduce gives the bus bandwidth (nccl-tests' definition:
algorithm bandwidth x 2(n-1)/n). Rank 0 prints the result line. The workers are collectives_worker.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocmpatch.smoke.child import StageFailure, stage_main, step
from rocmpatch.smoke.launch import launcher_timeout, torchrun


def run(config: dict[str, Any]) -> dict[str, Any]:
    world = int(config.get("world_size") or 2)
    timeout = launcher_timeout(config)
    step(f"torchrun: {world} processes, each importing torch, then the collectives")
    outcome = torchrun(world, "rocmpatch.smoke.collectives_worker", [json.dumps(config)], timeout,
                       Path(config["target"]))
    if outcome.timed_out:
        raise StageFailure(f"torchrun with {world} workers gave no result within {timeout:g}s "
                           "(a collective hung: check the fabric, NCCL_SOCKET_IFNAME/NCCL_DEBUG=INFO)",
                           last_output=outcome.tail)
    if outcome.result is None:
        last = outcome.tail[-1] if outcome.tail else "no output"
        raise StageFailure(f"torchrun exited with code {outcome.returncode} without a result: {last}",
                           last_output=outcome.tail)
    return outcome.result


if __name__ == "__main__":
    stage_main(run)
