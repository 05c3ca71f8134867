"""A fake `torchrun` for launch tests: an executable Python script, put first on PATH, that writes the
argument vector it got (and the GPU-selecting variables) as JSON to the file named by FAKE_TORCHRUN_OUT,
one line per start. Proves exactly what a launch ran, shell or no shell."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SCRIPT = """#!{python}
import json, os, sys
with open(os.environ["FAKE_TORCHRUN_OUT"], "a") as out:
    out.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS")}}}}) + "\\n")
"""


def install(directory: Path, monkeypatch) -> Path:
    """torchrun in `directory`, first on PATH; returns the file its calls are recorded in."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "torchrun"
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    record = directory / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TORCHRUN_OUT", str(record))
    return record


def calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
