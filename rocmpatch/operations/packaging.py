"""`rocmpatch package`: the patched tree of a checkout as a wheel that a framework's pinned
`megatron-core==X.Y.Z` accepts (docs/install.md, "Frameworks that install megatron-core").

Only a verified checkout is packaged, and what is built is the locked patched tree itself, read
from the object database (gitcmd.export_tree) into a scratch directory: neither the user's
working tree nor an untracked file of it goes into the wheel, and the target is not written.
The tree's own build backend builds it (`PY -m pip wheel --no-deps`, with the tree's pyproject.toml:
the package layout, compiled dataset helpers and dependencies are upstream's), with
NO_VCS_VERSION=1 so the version is the tree's release number and not `+<git hash>` of the scratch
copy; the wheel then gets the local label `+rocmpatch.<tree id>` (rocmpatch.wheels).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import gitcmd, processes, target, wheels
from rocmpatch.errors import CheckFailed, EnvironmentProblem, UsageError
from rocmpatch.operations import verifying
from rocmpatch.series import LoadedSeries

BUILD_TIMEOUT = 3600.0  # seconds: a build with isolation downloads setuptools and pybind11 first
LOG_NAME = "rocmpatch-package.log"  # written into the output directory when a build fails


@dataclass(frozen=True)
class Packaged:
    wheel: Path
    distribution: str
    version: str
    release: str
    overlay: str | None
    tree: str
    python: str


def package(loaded: LoadedSeries, directory: Path, out_dir: Path, *, python: str, build_isolation: bool = True,
            label: str | None = None, url_override: str | None = None) -> Packaged:
    _refuse_output_dir(out_dir, directory)
    if label is not None:
        wheels.labelled_version("0", label)  # a bad --label is refused before anything is done
    report = verifying.verify(loaded, directory, url_override=url_override)
    if not report.ok:
        raise CheckFailed(f"{directory}: not the patched tree of {loaded.describe()} ({len(report.differences)} path(s) differ): only a verified tree is packaged",
                          hint=f"'rocmpatch verify --target {directory}' lists them; apply or unapply until it says verified")
    tree = report.expected_tree
    label = label or f"rocmpatch.{tree[:8]}"
    repo = target.open_target(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rocmpatch-package-") as scratch:
        source, built = Path(scratch) / "tree", Path(scratch) / "wheels"
        source.mkdir()
        gitcmd.export_tree(repo, tree, source)
        wheel = _build(source, built, out_dir, python=python, build_isolation=build_isolation)
        labelled = wheels.relabel(wheel, label, out_dir)
    return Packaged(labelled.path, labelled.distribution, labelled.version, loaded.location.release,
                    str(loaded.overlay.directory) if loaded.overlay else None, tree, python)


def _refuse_output_dir(out_dir: Path, directory: Path) -> None:
    """Before any work: --out must be (or be creatable as) a writable directory outside the checkout
    (a wheel inside it is an added file: the checkout would no longer verify)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: exists and is not a directory", hint="give a directory (it is created if missing)")
    resolved, checkout = out_dir.resolve(), directory.resolve()
    if resolved == checkout or checkout in resolved.parents:
        raise UsageError(f"--out {out_dir}: inside the checkout {directory} (verify would then count the wheel as an added file)",
                         hint="give a directory outside it, such as dist/ beside the checkout")
    existing = next(path for path in (resolved, *resolved.parents) if path.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out_dir}: {existing} is not a writable directory", hint="give a directory you may write")


def _build(source: Path, built: Path, out_dir: Path, *, python: str, build_isolation: bool) -> Path:
    command = [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
               "--wheel-dir", str(built), str(source)]
    if not build_isolation:
        command.insert(4, "--no-build-isolation")
    environment = {**os.environ, "NO_VCS_VERSION": "1", "PIP_NO_INPUT": "1"}
    try:
        done = subprocess.run(command, cwd=source, env=environment, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=BUILD_TIMEOUT, preexec_fn=processes.dying_with_us())
    except FileNotFoundError:
        raise EnvironmentProblem(f"--python {python}: no such interpreter", hint="give the Python of the environment the framework runs in") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"the wheel build ran past {BUILD_TIMEOUT:.0f} s and was stopped", hint="build it by hand: see docs/install.md") from None
    found = sorted(built.glob("*.whl")) if built.is_dir() else []
    if done.returncode != 0 or len(found) != 1:
        log = out_dir / LOG_NAME
        log.write_bytes(done.stdout + done.stderr)
        why = _last_error(done.stdout + done.stderr) if done.returncode != 0 else f"{len(found)} wheels were built, not one"
        hint = f"the build's output is in {log}"
        if build_isolation:
            hint += "; without access to a package index, add --no-build-isolation (then PY needs setuptools, pybind11 and packaging)"
        raise EnvironmentProblem(f"building the wheel with {python} failed: {why}", hint=hint)
    return found[0]


def _last_error(output: bytes) -> str:
    """pip's own error line, else the last line the build printed."""
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[-1][:300]


def default_out_dir() -> Path:
    return Path("dist")
