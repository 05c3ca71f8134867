"""The gloo process group a check joins: as one rank of a run_ranks job where it set MASTER_ADDR
(with MASTER_PORT, RANK and WORLD_SIZE), else one rank alone on a file store (a check may set RANK
itself for Megatron's argument parsing, so RANK says nothing about the job)."""

from __future__ import annotations

import os
from pathlib import Path


def join(workdir: Path | None = None) -> int:
    """Initialize torch.distributed over gloo (see above); the world size."""
    import torch.distributed as dist

    if "MASTER_ADDR" in os.environ:
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", init_method=f"file://{(workdir or Path.cwd()) / 'dist-store'}", rank=0, world_size=1)
    return dist.get_world_size()
