"""The real upstream bytes of megatron/core at the pin, taken from the megatron-core 0.5.0 wheel.

The pin's megatron/core/ is byte-identical to that wheel's .py files, so CI can test the series
against real upstream code without a Megatron-LM mirror. The wheel is fetched once with pip from
the package registry (no torch needed) and cached between runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "megatron-core==0.5.0"


def wheel_cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocmpatch-tests"
    return Path(os.environ.get("ROCMPATCH_TEST_WHEEL_DIR", default))


def megatron_core_wheel() -> Path:
    """Path of the cached wheel, downloading it on first use."""
    cache = wheel_cache_dir()
    found = sorted(cache.glob("megatron_core-0.5.0-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    # The .py files are identical in every platform wheel; pin one so any Python can fetch it.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
         "--dest", str(cache), WHEEL_REQUIREMENT],
        check=True,
    )
    return sorted(cache.glob("megatron_core-0.5.0-*.whl"))[0]


def megatron_core_files() -> dict[str, bytes]:
    """{repository path: bytes} of every upstream source file the wheel carries (no built .so)."""
    with zipfile.ZipFile(megatron_core_wheel()) as wheel:
        return {
            name: wheel.read(name)
            for name in wheel.namelist()
            if name.startswith("megatron/") and not name.endswith((".so", "/"))
        }
