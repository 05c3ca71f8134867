"""Real upstream bytes of a Megatron-LM release, taken from its megatron-core wheel on PyPI.

CI has no Megatron-LM mirror, so the series tests read upstream code from the wheel whose Python
files are byte-identical to the pinned tag: the release's release.yaml names it (`wheel:
{requirement, python}`, with what it holds in a comment). A wheel is fetched once with pip from the
package registry (never installed, no torch needed) and cached between runs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from rocmpatch.schema import ReleaseWheel
from rocmpatch.series import find_patchsets


def release_wheel(release: str) -> ReleaseWheel:
    """The wheel patchsets/<release>/release.yaml names."""
    location = find_patchsets()[0].location(release)
    if location.info.wheel is None:
        raise LookupError(f"{location.info.path} names no test wheel (wheel: {{requirement, python}}); "
                          "see docs/adding-a-release.md")
    return location.info.wheel


def wheel_cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocmpatch-tests"
    return Path(os.environ.get("ROCMPATCH_TEST_WHEEL_DIR", default))


def megatron_core_wheel(release: str) -> Path:
    """Path of the cached wheel of `release`, downloading it on first use."""
    return download(release_wheel(release))


def download(wheel: ReleaseWheel) -> Path:
    """Path of the cached `wheel`, downloading it on first use."""
    cache = wheel_cache_dir()
    pattern = f"megatron_core-{wheel.version}-*.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", wheel.python, "--platform", "manylinux_2_28_x86_64",
         "--platform", "manylinux2014_x86_64", "--dest", str(cache), wheel.requirement],
        check=True,
    )
    return sorted(cache.glob(pattern))[0]


@functools.cache
def megatron_core_files(release: str) -> dict[str, bytes]:
    """{repository path: bytes} of every upstream source file the wheel carries (no built .so)."""
    return wheel_files(release_wheel(release))


@functools.cache
def wheel_files(wheel: ReleaseWheel) -> dict[str, bytes]:
    """{repository path: bytes} of every upstream source file `wheel` carries (no built .so)."""
    with zipfile.ZipFile(download(wheel)) as archive:
        return {
            name: archive.read(name)
            for name in archive.namelist()
            if name.startswith("megatron/") and not name.endswith((".so", "/"))
        }
