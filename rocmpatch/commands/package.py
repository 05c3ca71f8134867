"""`rocmpatch package --target DIR`: the verified patched checkout as a wheel with a local version
label, for frameworks that install megatron-core from PyPI (operations/packaging)."""

from __future__ import annotations

import shlex
from pathlib import Path

from rocmpatch import installed
from rocmpatch.commands import load_selected
from rocmpatch.console import emit_json, out
from rocmpatch.errors import ExitCode
from rocmpatch.operations import packaging


def run(*, target: Path, out_dir: Path | None, python: str | None, build_isolation: bool, label: str | None, series_dir: Path | None,
        release: str | None, overlay: Path | None, upstream_url: str | None, as_json: bool) -> ExitCode:
    loaded = load_selected(series_dir, release, overlay, target=target)
    python = python or installed.default_python()
    result = packaging.package(loaded, target, out_dir or packaging.default_out_dir(), python=python, build_isolation=build_isolation,
                               label=label, url_override=upstream_url)
    public = result.version.split("+", 1)[0]
    if as_json:
        emit_json({"wheel": str(result.wheel), "distribution": result.distribution, "version": result.version, "satisfies": f"=={public}",
                   "release": result.release, "overlay": result.overlay, "tree": result.tree, "python": result.python})
        return ExitCode.OK
    stack = result.release + (f" plus the overlay {result.overlay}" if result.overlay else "")
    out.print(f"built {result.wheel}", markup=False)
    out.print(f"  {result.distribution} {result.version}: the patched tree {result.tree} of {stack}, built with {python}", markup=False)
    out.print(f"  pip takes it for '{result.distribution.replace('_', '-')}=={public}' (a requirement without a local label accepts any)", markup=False)
    out.print("install it where the framework runs, then check what that Python imports:", markup=False)
    out.print(f"  {shlex.quote(python)} -m pip install {shlex.quote(str(result.wheel))}", markup=False)
    out.print(f"  rocmpatch verify --installed --python {shlex.quote(python)}", markup=False)
    return ExitCode.OK
