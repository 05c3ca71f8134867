"""The one harness of the series tests and of bench/'s series benchmarks, for every release in
patchsets/ (a release is data: its folder's series.yaml and release.yaml, and its upstream.lock
entry; nothing here names one).

- Releases: `releases_with(*features)` parametrises a test over the releases whose release.yaml
  declares every one of `features` (the fixture `release` of tests/series/conftest.py takes the
  value); `release_of(__file__)` is the release of a tests/series/<release>/ folder (its own tests),
  whose conftest.py gives it to the folder's tests with `own_release`. Which of them a session runs:
  `not_run_here` (ROCMPATCH_TEST_RELEASES; without it, CI's choice: the default release fully, the
  other releases' tests marked every_release).
- Trees (`Trees`, one per session, each tree built once and kept on disk): `wheel` is megatron/
  of the pin from the release's test wheel (testkit/megatron_wheel.py; without a wheel, the same
  directories read from the mirror, or a skip naming release.yaml's reason), `full` is the whole
  pinned tree of the mirror named by ROCMPATCH_TEST_UPSTREAM. Both take the series, or any part
  of it (`Release.patches(through=..., without=...)`: "without patch X, Y fails naming X"), applied
  with rocmpatch's own patching (full trees: trees.SeriesApplier, as `rocmpatch apply` does).
- Child checks (`run_checks`, `run_ranks`): testkit.checks.MODULE.run(groups) against a tree
  in a fresh process (testkit/child.py) that refuses NVIDIA-only packages as absent, even
  where installed; `run_ranks` runs it as every rank of one gloo job.
- CPU training (`pretrain`): torchrun of a tree's pretrain_gpt.py on N processes over gloo, its log
  lines parsed per iteration; on a timeout the whole process group is killed (torchrun and every
  rank it started), then the test fails with the output so far.

Megatron code never runs in the pytest process: a fresh process per run keeps pristine and patched
trees apart in sys.modules and keeps a hard crash out of pytest.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmpatch.patching import Patch
from rocmpatch.schema import FEATURES, load_series
from rocmpatch.series import Location, LoadedPatch, Patchsets, find_patchsets, loaded_patch
from testkit.trees import apply_series, read_from_mapping, write_files

ROOT = Path(__file__).resolve().parents[1]
MIRROR_VARIABLE = "ROCMPATCH_TEST_UPSTREAM"
RELEASES_VARIABLE = "ROCMPATCH_TEST_RELEASES"  # the releases a session tests fully (not_run_here)

# Refused in every child. Not stdlib or torch: only what NVIDIA ships or builds for CUDA.
NVIDIA_ONLY = (
    "transformer_engine", "transformer_engine_torch", "transformer_engine_extensions", "apex", "amp_C",
    "flash_attn", "flash_attn_2_cuda", "flash_attn_3", "flash_attn_interface", "flashattn_hopper",
    "triton", "grouped_gemm", "fused_weight_gradient_mlp_cuda", "fused_layer_norm_cuda",
)
# Not Megatron's own softmax extensions (scaled_*_softmax_cuda, built from megatron/fused_kernels
# with nvcc): a series may look them up with importlib.util.find_spec, which a refusal would break
# (it raises where an absent module gives None), and core_v0.5.0's checks put stand-ins for them
# on the path.


# ---------------------------------------------------------------- releases


@functools.cache
def patchsets() -> Patchsets:
    return find_patchsets(ROOT / "patchsets")[0]


@dataclass(frozen=True)
class Release:
    """One folder of patchsets/ as the tests see it."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def location(self) -> Location:
        return patchsets().location(self.name)

    @property
    def series_dir(self) -> Path:
        return self.location.series_dir

    @functools.cached_property
    def info(self):
        return self.location.info

    @property
    def features(self) -> tuple[str, ...]:
        return self.info.features or ()

    @property
    def module(self) -> str:
        """The folder of its own tests: tests/series/<module>/ (core_v1.2.0 -> core_v1_2_0)."""
        return re.sub(r"[.+-]", "_", self.name)

    @functools.cached_property
    def pin(self) -> str:
        """The pinned upstream commit, from upstream.lock."""
        lock = self.location.patchsets.lock_file()
        if lock is None or self.name not in lock.releases:
            raise AssertionError(f"{self.location.lock_path} has no entry for {self.name} (run 'rocmpatch lock')")
        return lock.releases[self.name].upstream.commit

    @functools.cached_property
    def series(self) -> tuple[LoadedPatch, ...]:
        """Every patch of series.yaml, parsed by rocmpatch's own loader, in series order."""
        series = load_series(self.series_dir)
        loaded = []
        for entry in series.entries:
            path = series.patch_path(entry)
            loaded.append(loaded_patch(entry, path.read_bytes(), path))
        return tuple(loaded)

    def patches(self, *, through: str | None = None, without: tuple[str, ...] = ()) -> tuple[LoadedPatch, ...]:
        """The series up to and including patch `through` (all of it by default), less `without`.
        A name the series lacks fails the test naming series.yaml."""
        names = [p.name for p in self.series]
        for name in (*([through] if through else []), *without):
            if name not in names:
                raise AssertionError(f"{self.series_dir / 'series.yaml'} lists no patch {name!r}")
        end = names.index(through) + 1 if through else len(names)
        return tuple(p for p in self.series[:end] if p.name not in without)


def releases() -> list[Release]:
    return [Release(name) for name in patchsets().releases()]


def releases_with(*features: str) -> pytest.MarkDecorator:
    """Parametrise a test (or, as `pytestmark`, a module) over the releases declaring all of
    `features` in release.yaml; the test takes them through the fixture `release`."""
    unknown = [f for f in features if f not in FEATURES]
    assert not unknown, f"no such feature {unknown} (rocmpatch.schema.FEATURES)"
    chosen = [r for r in releases() if set(features) <= set(r.features)]
    return pytest.mark.parametrize("release", [pytest.param(r, id=r.name) for r in chosen], indirect=True)


@functools.cache
def default_release() -> str:
    """The release rocmpatch takes without --release (patchsets/<release>/release.yaml says so)."""
    from rocmpatch.releases import choose

    return choose(ROOT / "patchsets", None).release


@functools.cache
def named_releases() -> frozenset[str] | None:
    """The releases ROCMPATCH_TEST_RELEASES names (comma-separated, or `all`); None where it is unset."""
    value = os.environ.get(RELEASES_VARIABLE, "").strip()
    if not value:
        return None
    known = [r.name for r in releases()]
    names = known if value == "all" else [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise pytest.UsageError(f"{RELEASES_VARIABLE}={value}: patchsets/ has no release {', '.join(unknown)} "
                                f"(it has {', '.join(known)}; or give all)")
    return frozenset(names)


def not_run_here(release: str, *, generic: bool, every_release: bool) -> str | None:
    """Why a series test of `release` is not run in this session, or None where it is. Unset
    ROCMPATCH_TEST_RELEASES (CI): the default release fully, the other releases' own folders, and
    their generic tests marked every_release (the cheap ones); set: those releases fully, no other."""
    named = named_releases()
    if named is not None:
        return None if release in named else f"{release}: not in {RELEASES_VARIABLE}={os.environ[RELEASES_VARIABLE]}"
    if not generic or every_release or release == default_release():
        return None
    return (f"{release}: runs where {RELEASES_VARIABLE} names the release (.github/workflows/series.yml, one job "
            f"per release); without it, only the default release ({default_release()}) runs every series test and "
            "the others the cheap ones (marked every_release)")


def needs_features(release: Release, *features: str) -> None:
    """Skip a test that needs more of `features` than releases_with() asked for, where one is not declared."""
    missing = [f for f in features if f not in release.features]
    if missing:
        pytest.skip(f"{release.info.path} does not declare {', '.join(missing)}")


def own_release(metafunc, conftest_file: str) -> None:
    """pytest_generate_tests of a tests/series/<release>/conftest.py: its tests that take the fixture
    `release` get that folder's release. A parameter, not a fixture overriding `release`: pytest
    keeps a session fixture built from an override (patched_wheel, ...) for the generic tests'
    releases too, where a parameter tears it down when the release changes."""
    if "release" in metafunc.fixturenames:
        release = release_of(conftest_file)
        metafunc.parametrize("release", [pytest.param(release, id=release.name)], indirect=True)


def release_of(test_file: str) -> Release:
    """The release of the folder holding `test_file`: tests/series/<module>/ (a release's own tests)
    or testkit/checks/<module>/ (their child checks)."""
    folder = Path(test_file).resolve().parent.name
    found = [r for r in releases() if r.module == folder]
    assert found, f"{folder}/ of {test_file} belongs to no release in patchsets/"
    return found[0]


# ---------------------------------------------------------------- trees


def mirror() -> Path | None:
    """The Megatron-LM mirror named by ROCMPATCH_TEST_UPSTREAM, or None."""
    value = os.environ.get(MIRROR_VARIABLE)
    return Path(value.removeprefix("file://")) if value else None


def wheel_files(release: Release) -> dict[str, bytes]:
    """{path: bytes} of megatron/ of the pin as the release's test wheel holds it; a release with
    `wheel: {none: REASON}` reads the same directories from the mirror, or skips saying why."""
    if release.info.wheel is not None:
        from testkit.megatron_wheel import megatron_core_files

        files = megatron_core_files(release.name)
        if mirror() is not None and not any(path.startswith("megatron/training/") for path in files):
            # a core-only wheel: megatron/training of the pin from the mirror, for the checks that import it
            files = {**files, **{path: data for path, data in _mirror_megatron(release.name, str(mirror())).items()
                                 if path.startswith("megatron/training/")}}
        return files
    reason = release.info.no_wheel or f"{release.info.path} names no test wheel"
    if mirror() is None:
        pytest.skip(f"{release}: no test wheel ({reason}); set {MIRROR_VARIABLE} to read its tree from a mirror")
    return _mirror_megatron(release.name, str(mirror()))


@functools.cache
def _mirror_megatron(release: str, mirror_path: str) -> dict[str, bytes]:
    applier = series_applier(Release(release), Path(mirror_path), ())  # nothing applied: a reader of the pin
    return {path: applier.read(path) for path in applier.reader.entries
            if path.startswith(("megatron/core/", "megatron/training/")) and not path.endswith(".so")}


def wheel_part(patch: Patch, known: set[str], carried: tuple[str, ...]) -> Patch:
    """The file changes of `patch` a wheel's partial tree takes: those of files it has (or an
    earlier patch created) and new files under the directories it carries."""
    kept = tuple(f for f in patch.files
                 if (f.old_path in known if f.old_path is not None else (f.new_path or "").startswith(carried)))
    known.update(f.new_path for f in kept if f.new_path is not None)
    return Patch(patch.name, patch.source, kept)


def wheel_tree(release: Release, dest: Path, patches: tuple[LoadedPatch, ...]) -> Path:
    """megatron/ of the pin from the wheel with `patches` applied (the parts its files take), on disk."""
    files = wheel_files(release)
    known, carried = set(files), tuple(sorted({"/".join(p.split("/")[:2]) + "/" for p in files}))
    parts = [wheel_part(p.patch, known, carried) for p in patches]
    return write_files(dest, {**files, **apply_series(parts, read_from_mapping(files))})


def series_applier(release: Release, mirror_path: Path, patches: tuple[LoadedPatch, ...]):
    """The pinned tree of the mirror in memory with `patches` applied as `rocmpatch apply` applies
    them (trees.SeriesApplier, which writes nothing into the mirror)."""
    from rocmpatch import gitcmd
    from rocmpatch.trees import SeriesApplier

    repo = gitcmd.open_repo(mirror_path)
    applier = SeriesApplier(repo, gitcmd.tree_of(repo, release.pin))
    for patch in patches:
        applier.apply(patch)
    return applier


def full_tree(release: Release, mirror_path: Path, dest: Path, patches: tuple[LoadedPatch, ...]) -> Path:
    """series_applier's tree on disk, regular files with their executable bits."""
    applier = series_applier(release, mirror_path, patches)
    entries = applier.reader.entries
    files = {path: applier.read(path) for path in {**entries, **applier.changes}}
    modes = {path: entry.mode for path, entry in entries.items()} | applier.modes
    return write_files(dest, files, frozenset(path for path, mode in modes.items() if mode == 0o100755))


class Trees:
    """Trees on disk, each built once per session: (release, kind, patches) -> its directory."""

    def __init__(self, tmp_path_factory) -> None:
        self.factory, self.built = tmp_path_factory, {}

    def _key(self, release: Release, kind: str, patches) -> tuple:
        return (release.name, kind, tuple(p.name for p in patches))

    def wheel(self, release: Release, patches: tuple[LoadedPatch, ...] | None = None) -> Path:
        """megatron/ of the pin from the release's wheel with `patches` (the whole series by default)."""
        patches = release.series if patches is None else tuple(patches)
        key = self._key(release, "wheel", patches)
        if key not in self.built:
            self.built[key] = wheel_tree(release, self.factory.mktemp(f"{release.module}-wheel"), patches)
        return self.built[key]

    def without(self, release: Release, name: str, tree: Path) -> Path:
        """A copy of `tree` (patched by the whole series) with patch `name` reversed: the series
        less that patch, where later patches build on its lines."""
        from testkit.smoke_trees import without_patch

        key = (release.name, "without", str(tree), name)
        if key not in self.built:
            self.built[key] = without_patch(tree, release.series_dir, name, self.factory.mktemp(f"{release.module}-without") / "tree")
        return self.built[key]

    def full(self, release: Release, mirror_path: Path, patches: tuple[LoadedPatch, ...] | None = None) -> Path:
        """The whole pinned tree of the mirror with `patches` (the whole series by default)."""
        patches = release.series if patches is None else tuple(patches)
        key = self._key(release, "full", patches)
        if key not in self.built:
            self.built[key] = full_tree(release, mirror_path, self.factory.mktemp(f"{release.module}-full") / "tree", patches)
        return self.built[key]


# ---------------------------------------------------------------- processes


# What a parent torchrun, a CUDA setup or a developer's shell would otherwise pass down.
INHERITED = ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_",
             "NVTE_")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what a parent job would pass down, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    env.update(extra)
    return env


def run_process(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own: on a timeout the whole group is killed (a
    launcher and every process it started), then the test fails with the output so far."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s (process group killed): {' '.join(command[:8])} ...\n"
                             f"{stdout[-3000:]}\n{stderr[-5000:]}") from None
    finally:
        if proc.poll() is None:  # pytest interrupted us: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def run_checks(module: str, groups: str, tree: Path, workdir: Path, *, timeout: int = 600,
               env: dict[str, str] | None = None) -> dict:
    """Run testkit.MODULE.run(groups) against `tree` in a fresh process (testkit/child.py),
    refusing NVIDIA_ONLY: its JSON dict."""
    from testkit.child import run_checks as run_child

    return run_child(module, groups, tree, workdir, timeout, env=env, block=NVIDIA_ONLY)


def run_ranks(module: str, groups: str, tree: Path, workdirs: list[Path], *, timeout: int = 600,
              env: dict[str, str] | None = None) -> list[dict]:
    """run_checks as every rank of one gloo job (RANK, WORLD_SIZE, MASTER_ADDR/PORT set for each
    child, with `env`; one workdir per rank): each rank's JSON dict, in rank order."""
    port, size = free_port(), len(workdirs)
    with ThreadPoolExecutor(size) as pool:
        runs = [pool.submit(run_checks, module, groups, tree, workdir, timeout=timeout,
                            env={**(env or {}), "RANK": str(rank), "WORLD_SIZE": str(size),
                                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
                for rank, workdir in enumerate(workdirs)]
        return [run.result() for run in runs]


# ---------------------------------------------------------------- CPU training


# One log line of Megatron's training loop: "iteration  3/  8 | consumed samples: 24 | ... | lm loss: 4.1E+00 |".
ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|(.*)")
CPU_LINE = "> no GPU visible and --distributed-backend gloo: training on CPU"


@dataclass(frozen=True)
class Training:
    """What one pretrain_gpt.py run printed: exit status, output, and each iteration's log fields."""

    returncode: int
    output: str
    logged: dict[int, dict[str, str]]  # iteration: {field: text}, e.g. {"lm loss": "4.1E+00", ...}

    def values(self, field: str) -> dict[int, float]:
        """{iteration: float(field)} of the iterations that logged `field`."""
        return {i: float(fields[field]) for i, fields in self.logged.items() if field in fields}

    @property
    def losses(self) -> dict[int, float]:
        return self.values("lm loss")

    def tail(self, size: int = 4000) -> str:
        return self.output[-size:]


def log_fields(output: str) -> dict[int, dict[str, str]]:
    logged = {}
    for match in ITERATION.finditer(output):
        fields = {}
        for part in match[2].split("|"):
            name, sep, value = part.partition(":")
            if sep and value.strip():
                fields[name.strip()] = value.strip()
        logged[int(match[1])] = fields
    return logged


def needs_training_tools() -> None:
    """pretrain_gpt.py's rank 0 builds megatron/core/datasets/helpers.cpp (make, g++, pybind11);
    these runs check the CPU path, so a machine with a GPU skips them."""
    missing = [tool for tool in ("make", "g++", "python3-config") if shutil.which(tool) is None]
    if importlib.util.find_spec("pybind11") is None:
        missing.append("pybind11")
    if missing:
        pytest.skip(f"pretrain_gpt.py builds the dataset helpers: missing {', '.join(missing)}")
    import torch

    if torch.cuda.is_available():
        pytest.skip("these runs check the CPU path; this machine has a GPU")


def pretrain(tree: Path, args: list[str], *, processes: int = 2, timeout: float = 500, threads: int = 1,
             script: str = "pretrain_gpt.py", wrapper: Path | None = None, env: dict[str, str] | None = None) -> Training:
    """`torchrun --standalone --nproc-per-node PROCESSES [WRAPPER] SCRIPT ARGS` in `tree` on the CPU
    (no GPU visible, OMP_NUM_THREADS=threads)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               *([str(wrapper)] if wrapper else []), script, *args]
    run_env = clean_env(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(threads), PYTHONPATH=str(tree), **(env or {}))
    done = run_process(command, cwd=tree, env=run_env, timeout=timeout)
    output = done.stdout + done.stderr
    return Training(done.returncode, output, log_fields(output))


def trains(tree: Path, args: list[str], **options) -> Training:
    """pretrain(): it must exit 0 and log finite losses."""
    run = pretrain(tree, args, **options)
    assert run.returncode == 0, f"{options.get('script', 'pretrain_gpt.py')} {' '.join(args[-12:])} failed:\n{run.tail(6000)}"
    losses = run.losses
    assert losses and all(math.isfinite(v) for v in losses.values()), run.tail()
    return run


def assert_learns(losses: dict[int, float], iters: int, by: float = 0.1) -> None:
    assert sorted(losses) == list(range(1, iters + 1)), losses
    assert losses[iters] < losses[1] - by, losses


RECORDER = Path(__file__).resolve().parent / "record_calls.py"


def recorded_run(tree: Path, workdir: Path, args: list[str], iters: int) -> dict:
    """pretrain_gpt.py on one process under record_calls.py: what reached torch's SDPA and optimizers
    ({"sdpa": [(signature, count)], "optimizers": [...], "rms_norm": count})."""
    out = workdir / "record.json"
    run = pretrain(tree, args, processes=1, wrapper=RECORDER, env={"ROCMPATCH_RECORD": str(out)})
    assert run.returncode == 0, run.tail(6000)
    assert len(run.losses) == iters, run.tail()
    record = json.loads(Path(f"{out}.0").read_text())
    record["sdpa"] = [(json.loads(signature), count) for signature, count in record["sdpa"].items()]
    return record


def trains_on_cpu(tree: Path, *extra: str, iters: int = 8, base: list[str] | None = None, **options) -> Training:
    """trains() of `base` (the tiny Llama by default) for `iters` iterations plus `extra`, on two
    processes over gloo: the CPU line said once."""
    from testkit.flags import TINY_LLAMA

    run = trains(tree, [*(TINY_LLAMA if base is None else base), "--train-iters", str(iters), *extra], **options)
    assert run.output.count(CPU_LINE) == 1, run.tail()
    return run


def smoke_json(release: Release, target: Path, *extra: str) -> tuple[int, dict]:
    """`rocmpatch smoke --target TARGET --device cpu --json --release RELEASE EXTRA`, in process:
    its exit code and JSON report."""
    from click.testing import CliRunner

    from rocmpatch.cli import app

    result = CliRunner().invoke(app, ["smoke", "--target", str(target), "--device", "cpu", "--json",
                                      "--release", release.name, *extra])
    start = result.stdout.index("{")  # progress lines go to stderr; stdout is the JSON document
    return result.exit_code, json.loads(result.stdout[start:])
