"""The shared harness of the core_v0.19.0 series tests, both sides of the child process.

Parent side (pytest; fixtures in conftest.py):
- series_through(name): the release's patches from patchsets/core_v0.19.0/series.yaml, parsed by
  rocmpatch's own loader, in series order up to `name` (all of them by default);
- wheel_tree(dest, patches): megatron/core + megatron/training of the pin, the megatron-core 0.19.1
  wheel's bytes (tests/megatron_wheel.py), with the patches applied in memory by rocmpatch's
  patching (only the files the wheel carries), written to dest;
- full_tree(mirror, dest, patches): the whole pinned tree from a Megatron-LM mirror with the patches
  applied as `rocmpatch apply` does (trees.SeriesApplier), written to dest;
- run_child(module, groups, tree, workdir): runs tests.series.core_v0_19_0.MODULE.run(groups) in a
  fresh process through the runner every release shares (tests/series/child.py) and returns its JSON
  dict. The child refuses this release's NVIDIA-only modules (NVIDIA_ONLY, triton included) as
  absent, before anything is imported, even where installed, so no result depends on this machine.
- run_ranks(module, groups, tree, workdirs): run_child as every rank of one gloo job.

Megatron code never runs in the pytest process: a fresh process per run keeps pristine and patched
trees apart in sys.modules and keeps a hard crash out of pytest.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RELEASE = "core_v0.19.0"
PIN = "5be9626709af2722333bf54797c954c09edeada3"
ROOT = Path(__file__).resolve().parents[3]
SERIES_DIR = ROOT / "patchsets" / RELEASE

# Refused in the child. Not stdlib or torch: only what NVIDIA ships or builds for CUDA.
NVIDIA_ONLY = (
    "transformer_engine", "transformer_engine_torch", "transformer_engine_extensions", "apex", "amp_C",
    "flash_attn", "flash_attn_2_cuda", "flash_attn_3", "flash_attn_interface", "flashattn_hopper",
    "triton", "grouped_gemm", "fused_weight_gradient_mlp_cuda", "fused_layer_norm_cuda",
    "scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda", "scaled_softmax_cuda",
)

# ---------------------------------------------------------------- parent side


def series_through(name: str | None = None) -> list:
    """The release's rocmpatch Patch objects in series order, up to and including `name`."""
    from rocmpatch.schema import load_series
    from rocmpatch.series import loaded_patch

    series = load_series(SERIES_DIR)
    patches = []
    for entry in series.entries:
        path = series.patch_path(entry)
        patches.append(loaded_patch(entry, path.read_bytes(), path))
        if entry.name == name:
            return patches
    if name is not None:
        raise AssertionError(f"{SERIES_DIR / 'series.yaml'} lists no patch {name!r}")
    return patches


def _write(dest: Path, files: dict[str, bytes | None]) -> Path:
    for path, data in files.items():
        if data is not None:
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return dest


def wheel_tree(dest: Path, loaded: list) -> Path:
    """The wheel's megatron/ of the pin with `loaded` applied (the parts the wheel's files take)."""
    from rocmpatch.patching import Patch
    from tests.series.trees import apply_series, read_from_mapping
    from tests.megatron_wheel import megatron_core_files

    files = megatron_core_files(RELEASE)
    known = set(files)  # the wheel's files and those an earlier patch created
    parts = []
    for p in loaded:
        kept = tuple(f for f in p.patch.files if f.old_path is None or f.old_path in known)
        known.update(f.new_path for f in kept if f.new_path is not None)
        parts.append(Patch(p.patch.name, p.patch.source, kept))
    return _write(dest, {**files, **apply_series(parts, read_from_mapping(files))})


def full_tree(mirror: Path, dest: Path, loaded: list) -> Path:
    """The whole pinned tree of a Megatron-LM mirror with `loaded` applied, regular files only."""
    from rocmpatch import gitcmd
    from rocmpatch.trees import SeriesApplier

    repo = gitcmd.open_repo(mirror)
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, PIN))
    for patch in loaded:
        applier.apply(patch)
    paths = {**applier.reader.entries, **applier.changes}
    return _write(dest, {path: applier.read(path) for path in paths})


def run_child(module: str, groups: str, tree: Path, workdir: Path, *, timeout: int = 600, env: dict | None = None) -> dict:
    """Run tests.series.core_v0_19_0.MODULE.run(groups) against tree in a fresh process (the shared
    runner, tests/series/child.py), refusing this release's NVIDIA-only modules, triton included."""
    from tests.series.child import run_checks

    return run_checks(f"core_v0_19_0.{module}", groups, tree, workdir, timeout, env=env, block=NVIDIA_ONLY)


def run_ranks(module: str, groups: str, tree: Path, workdirs: list[Path], *, timeout: int = 600) -> list[dict]:
    """run_child as every rank of one gloo job (RANK, WORLD_SIZE, MASTER_ADDR/PORT set for each
    child; one workdir per rank): each rank's JSON dict, in rank order."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    size = len(workdirs)
    with ThreadPoolExecutor(size) as pool:
        runs = [pool.submit(run_child, module, groups, tree, workdir, timeout=timeout,
                            env={"RANK": str(rank), "WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": port})
                for rank, workdir in enumerate(workdirs)]
        return [run.result() for run in runs]
