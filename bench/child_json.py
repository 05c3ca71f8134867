"""A bench child process whose last stdout line is its JSON result (bench_attention, bench_grouped_gemm)."""

from __future__ import annotations

import json
import os
import subprocess


def run_json_child(command: list[str], device: str, what: str) -> dict:
    """Run `command` (warnings silenced; on the CPU, no GPU visible) and return its last JSON line;
    SystemExit naming `what` with the child's stderr when it fails or prints none."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])
