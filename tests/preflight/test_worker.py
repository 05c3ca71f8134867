"""The preflight as it runs: several processes with gloo on the CPU, one and two 'nodes'."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nodes: int, per_node: int, *args: str) -> list[subprocess.CompletedProcess]:
    """Start the ranks with the variables torchrun would set (GROUP_RANK names the node)."""
    port, world = free_port(), nodes * per_node
    procs = []
    for rank in range(world):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % per_node),
               "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "rocmpatch.preflight", "--device", "cpu", "--gemm-size", "64",
                                       "--gemm-iters", "2", "--size-mb", "0.25", "--iters", "2", *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=60), *p.communicate()) for p in procs]


def test_two_nodes_of_two_ranks_pass_and_report(tmp_path):
    pytest.importorskip("torch")  # the ranks measure with PyTorch
    report = tmp_path / "preflight.json"
    # Four ranks on a shared CPU: how fast each is says nothing; only the report and its exits are tested.
    done = launch(2, 2, "--json", str(report), "--min-of-median", "0")
    assert [d.returncode for d in done] == [0, 0, 0, 0], done[0].stderr
    assert "preflight passed" in done[0].stdout and done[1].stdout == ""
    doc = json.loads(report.read_text())
    assert doc["ok"] and [n["node"] for n in doc["nodes"]] == ["0", "1"]
    assert all(n["intra_busbw"] > 0 and n["inter_busbw"] > 0 for n in doc["nodes"])
    assert doc["pairs"][0]["nodes"] == ["0", "1"] and doc["world_busbw_gbps"] > 0
    assert len(doc["ranks"]) == 4


def test_below_the_floor_every_rank_exits_nonzero():
    pytest.importorskip("torch")
    done = launch(2, 1, "--min-busbw", "1000000")
    assert [d.returncode for d in done] == [1, 1], done[0].stderr
    assert "preflight FAILED" in done[0].stdout and "inter-node: node 0" in done[0].stdout


def test_outside_torchrun_it_says_how_to_start():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-m", "rocmpatch.preflight"], env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert done.returncode == 2 and "torchrun --nproc-per-node" in done.stderr


def test_a_report_rank_0_cannot_write_stops_every_rank_before_measuring(tmp_path):
    """--json in a missing folder: rank 0 finds it before any timing and every rank exits 2 (not a
    traceback after the whole preflight); nothing is written."""
    pytest.importorskip("torch")  # the ranks start by importing it
    done = launch(1, 2, "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert [d.returncode for d in done] == [2, 2], done[0].stderr
    assert "--json" in done[0].stderr and "Traceback" not in done[0].stderr + done[1].stderr
    assert "GEMM per rank" not in done[0].stdout and not (tmp_path / "no").exists()
