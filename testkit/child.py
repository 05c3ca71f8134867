"""Series checks on a Megatron tree, each group in a fresh process: both sides of that process.

The test calls run_checks(module, group, tree, workdir), which runs
`python -m testkit.child MODULE GROUP TREE OUT`: the child refuses NVIDIA-only packages before
anything is imported (so no result depends on what this machine happens to have installed), puts
TREE first on sys.path, runs testkit.MODULE.run(GROUP) (MODULE such as checks.attention or
checks.core_v0_5_0.part1_checks) and writes its JSON result to OUT.
A fresh process per group keeps pristine and patched trees apart in sys.modules, keeps a hard
crash or a process group out of pytest, and the test process never imports Megatron. The child
is testkit.child, not a module of tests/: a Megatron tree has a `tests` package of its own, which
would shadow ours wherever the tree comes first on sys.path (a process the checkpoint writer
spawns imports this __main__ again with the tree first).
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import subprocess
import sys
from pathlib import Path

from rocmpatch.smoke.child import NVIDIA_ONLY, put_target_first

ROOT = Path(__file__).resolve().parents[1]
# What a parent torchrun, a CUDA setup or a developer's shell would otherwise pass down.
INHERITED = ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_",
             "NVTE_")
BLOCK_VARIABLE = "ROCMPATCH_TEST_BLOCK"  # more modules the child refuses, comma-separated (a release's own list)


def run_checks(module: str, group: str, tree: Path, workdir: Path, timeout: int = 600, *,
               env: dict[str, str] | None = None, block: tuple[str, ...] = ()) -> dict:
    """Run one group of testkit/MODULE.py against tree, in workdir: its JSON result. `block`
    adds to the NVIDIA-only modules the child refuses; `env` adds to its environment."""
    out = workdir / f"{module.replace('.', '-')}-{group.replace(',', '+')}.json"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    # rocmpatch and testkit import from ROOT; the child puts the tree before it.
    child_env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", OMP_NUM_THREADS="2",
                     PYTHONWARNINGS="ignore", PYTHONDONTWRITEBYTECODE="1", **{BLOCK_VARIABLE: ",".join(block)}, **(env or {}))
    env = child_env
    proc = subprocess.run(
        [sys.executable, "-m", "testkit.child", module, group, str(tree), str(out)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout,
    )
    if not out.exists():
        raise AssertionError(f"{module} {group} crashed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return json.loads(out.read_text())


class BlockNvidiaOnly(importlib.abc.MetaPathFinder):
    """Refuses the NVIDIA-only packages even where installed. Not the *_cuda extensions Megatron
    builds itself: core-kernels puts stand-ins for them on the path."""

    def __init__(self, extra: set[str]) -> None:
        self.blocked = set(NVIDIA_ONLY) | extra

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            # ModuleNotFoundError, as a real absence raises: code catching only that (core_v0.19.0's
            # tensor_parallel/random.py) must see these packages as absent, not crash.
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


def main() -> None:
    module, group, tree, out = sys.argv[1:5]
    sys.meta_path.insert(0, BlockNvidiaOnly({name for name in os.environ.get(BLOCK_VARIABLE, "").split(",") if name}))
    put_target_first(tree)
    result = importlib.import_module(f"testkit.{module}").run(group)
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
