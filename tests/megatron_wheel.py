"""Real upstream bytes of a Megatron-LM release, taken from its megatron-core wheel on PyPI.

CI has no Megatron-LM mirror, so the series tests read upstream code from the wheel whose Python
files are byte-identical to the pinned tag:
- core_v0.5.0: megatron-core==0.5.0 holds megatron/core/;
- core_v0.19.0: megatron-core==0.19.1 (yanked as "wrong version", cp312 only) holds megatron/core/
  and most of megatron/training/, identical to the tag 5be96267.
A wheel is fetched once with pip from the package registry (never installed, no torch needed) and
cached between runs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReleaseWheel:
    version: str
    python_version: str  # any wheel of that version carries the same .py files; pick one pip can fetch

    @property
    def requirement(self) -> str:
        return f"megatron-core=={self.version}"


WHEELS = {
    "core_v0.5.0": ReleaseWheel("0.5.0", "3.11"),
    "core_v0.19.0": ReleaseWheel("0.19.1", "3.12"),
}


def wheel_cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocmpatch-tests"
    return Path(os.environ.get("ROCMPATCH_TEST_WHEEL_DIR", default))


def megatron_core_wheel(release: str = "core_v0.5.0") -> Path:
    """Path of the cached wheel of `release`, downloading it on first use."""
    wheel = WHEELS[release]
    cache = wheel_cache_dir()
    pattern = f"megatron_core-{wheel.version}-*.whl"
    found = sorted(cache.glob(pattern))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", wheel.python_version, "--platform", "manylinux_2_28_x86_64",
         "--platform", "manylinux2014_x86_64", "--dest", str(cache), wheel.requirement],
        check=True,
    )
    return sorted(cache.glob(pattern))[0]


@functools.cache
def megatron_core_files(release: str = "core_v0.5.0") -> dict[str, bytes]:
    """{repository path: bytes} of every upstream source file the wheel carries (no built .so)."""
    with zipfile.ZipFile(megatron_core_wheel(release)) as wheel:
        return {
            name: wheel.read(name)
            for name in wheel.namelist()
            if name.startswith("megatron/") and not name.endswith((".so", "/"))
        }
