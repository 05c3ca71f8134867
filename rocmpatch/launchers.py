"""The one torchrun builder: `recipe launch`, `preflight`, smoke's collectives and train stages and
bench's training runs build their command here, as an argument vector. Nothing goes through a shell.
(examples/pretrain_gpt_rocm.sh, standalone bash, mirrors the one-node line; a test keeps it equal.)

A Launch is what runs: environment assignments, then the argument vector, each value exactly as the
user gave it (a `$`, a brace, a space or a line break reaches Megatron unchanged). The only words a
shell would expand are the values each node's own shell supplies in a multi-node line
($MASTER_ADDR, $SLURM_JOB_ID): a NodeValue, printed as a quoted variable and, when rocmpatch starts
the line itself, read from its environment. Printed, a Launch is one shell line (POSIX quoting,
shlex) that, pasted, runs the same vector; run, it goes to the program with no shell between.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, Union

from rocmpatch.errors import EnvironmentProblem, UsageError

RDZV_PORT = 29500
TORCHRUN = ("torchrun",)  # the line a user runs (and `recipe launch` starts): torchrun on PATH
THIS_PYTHON = (sys.executable, "-m", "torch.distributed.run")  # rocmpatch's own workers: this interpreter's torch
_PLAIN_SUFFIX = re.compile(r"[\w:.-]*")


@dataclass(frozen=True)
class NodeValue:
    """A value each node's shell supplies in a multi-node line: printed as "$NAME<suffix>", read
    from the environment when rocmpatch starts the line itself."""

    name: str
    suffix: str = ""
    hint: str = ""

    def __post_init__(self) -> None:
        assert _PLAIN_SUFFIX.fullmatch(self.suffix), self.suffix  # nothing a shell would expand inside "..."

    def shell(self) -> str:
        return f'"${self.name}{self.suffix}"'

    def resolve(self, environ: Mapping[str, str]) -> str:
        value = environ.get(self.name)
        if not value:
            raise UsageError(f"${self.name} is not set, and the launch line needs it", hint=self.hint or f"export {self.name} first")
        return value + self.suffix


Token = Union[str, NodeValue]


@dataclass(frozen=True)
class Launch:
    argv: tuple[Token, ...]
    env: tuple[tuple[str, str], ...] = ()  # NAME=value set for the program (printed before it)
    preamble: tuple[str, ...] = ()  # comment and shell lines to print before a multi-node line

    def line(self) -> str:
        """One shell line that runs the same vector (a value with a line break spans lines, quoted)."""
        words = [f"{name}={shlex.quote(value) if value else ''}" for name, value in self.env]
        words += [token.shell() if isinstance(token, NodeValue) else shlex.quote(token) for token in self.argv]
        return " ".join(words)

    def lines(self) -> list[str]:
        return [*self.preamble, self.line()]

    def vector(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The argument vector as the program gets it (node values read from `environ`)."""
        environ = os.environ if environ is None else environ
        return [token.resolve(environ) if isinstance(token, NodeValue) else token for token in self.argv]

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**(os.environ if base is None else base), **dict(self.env)}


def visible_gpus() -> int | None:
    """The GPUs torch sees in this Python (HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES applied), or
    None without torch: what `--device auto` and the launch checks go by."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


MASTER_ADDR_HINT = "a host every node can reach (e.g. the first node); --dry-run prints the lines that set it"


def torchrun(program: Sequence[str], *, nproc: int, nodes: int = 1, slurm: bool = False, job: str = "rocmpatch",
             launcher: Sequence[str] = TORCHRUN, env: Mapping[str, str] | None = None) -> Launch:
    """torchrun (`launcher`) with `nproc` processes on each of `nodes` nodes, then `program` (a
    script and its arguments, or `-m module ...`): --standalone on one node, a c10d rendezvous at
    $MASTER_ADDR on several, and under Slurm `srun` starting one torchrun per node."""
    master = NodeValue("MASTER_ADDR", f":{RDZV_PORT}", MASTER_ADDR_HINT)
    if slurm:
        argv: list[Token] = ["srun", "--nodes", str(nodes), "--ntasks-per-node", "1", *launcher, "--nnodes", str(nodes),
                             "--nproc-per-node", str(nproc), "--rdzv-id", NodeValue("SLURM_JOB_ID", hint="run it inside an sbatch or salloc allocation"),
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", master]
        preamble = ("# inside an sbatch allocation: the first node hosts the rendezvous",
                    "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")
    elif nodes == 1:
        argv, preamble = [*launcher, "--standalone", "--nproc-per-node", str(nproc)], ()
    else:
        argv = [*launcher, "--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--rdzv-id", job,
                "--rdzv-backend", "c10d", "--rdzv-endpoint", master]
        preamble = (f"# run the same line on each of the {nodes} nodes; MASTER_ADDR: a host every node can reach (e.g. the first node)",)
    return Launch(tuple([*argv, *program]), tuple((env or {}).items()), preamble)


def run(launch: Launch, *, cwd: str | None = None, on_line: Callable[[str, str], None] | None = None) -> int:
    """Start the launch with no shell; its exit status. The program must be on PATH. With on_line,
    each line it prints goes there instead, with "stdout" or "stderr" (Python unbuffered, so that
    lines come as they are printed)."""
    argv = launch.vector()
    environment = launch.environment()
    if shutil.which(argv[0], path=environment.get("PATH")) is None:
        raise EnvironmentProblem(f"{argv[0]} not found on PATH", hint="install PyTorch in this environment (torchrun comes with it), or activate the one that has it")
    if on_line is None:
        return subprocess.run(argv, env=environment, cwd=cwd).returncode
    environment.setdefault("PYTHONUNBUFFERED", "1")
    process = subprocess.Popen(argv, env=environment, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, errors="replace", bufsize=1)

    def pump(stream, name: str) -> None:
        for line in stream:
            on_line(line.rstrip("\n"), name)

    # Both streams are read in threads: the main thread only waits, so a Ctrl-C raised in it can
    # never fall between reading a line and showing it (torchrun's "stopping the workers" was lost so).
    readers = [threading.Thread(target=pump, args=(stream, name), daemon=True)
               for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))]
    for reader in readers:
        reader.start()
    try:
        code = process.wait()
        for reader in readers:
            reader.join()
        return code
    except BaseException:  # Ctrl-C reached torchrun too: show it stopping its workers, then stop
        try:
            process.wait(timeout=30)
        except BaseException:  # it did not stop, or a second Ctrl-C
            process.kill()
        for reader in readers:
            reader.join(timeout=2)
        raise
