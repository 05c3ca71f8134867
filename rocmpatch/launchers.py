"""Command lines that start a job the way it will really run: torchrun on one node, torchrun on each
of several nodes with a c10d rendezvous, or srun starting one torchrun per node under Slurm.

Shell variables ($MASTER_ADDR, $SLURM_JOB_ID, $DATA_PATH) are left for the shell to expand.
"""

from __future__ import annotations

import re
import shlex

_PLAIN = re.compile(r"^[\w$@%+=:,./{}-]+$")
RDZV_PORT = 29500


def quote(token: str) -> str:
    """Quote for a POSIX shell, but leave $VARIABLES in plain tokens to be expanded."""
    return token if _PLAIN.match(token) else shlex.quote(token)


def render(argv: list[str]) -> str:
    return " ".join(quote(token) for token in argv)


def torchrun(gpus: int, nodes: int, *, slurm: bool, job: str) -> list[str]:
    """The launcher part of the command line, up to (not including) the script or `-m module`."""
    if slurm:
        return ["srun", "--nodes", str(nodes), "--ntasks-per-node", "1", "torchrun", "--nnodes", str(nodes),
                "--nproc-per-node", str(gpus), "--rdzv-id", "$SLURM_JOB_ID", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"$MASTER_ADDR:{RDZV_PORT}"]
    if nodes == 1:
        return ["torchrun", "--standalone", "--nproc-per-node", str(gpus)]
    return ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus), "--rdzv-id", job,
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$MASTER_ADDR:{RDZV_PORT}"]


def preamble(nodes: int, *, slurm: bool) -> list[str]:
    """Comment and shell lines to put before a multi-node command."""
    if slurm:
        return ["# inside an sbatch allocation: the first node hosts the rendezvous",
                "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)"]
    if nodes > 1:
        return [f"# run the same line on each of the {nodes} nodes; MASTER_ADDR: a host every node can reach (e.g. the first node)"]
    return []
