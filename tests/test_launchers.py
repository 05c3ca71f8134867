"""rocmpatch.launchers: the one torchrun builder. A launch's printed line, pasted into a shell, runs
the same vector rocmpatch runs without one (a fake torchrun on PATH records both)."""

from __future__ import annotations

import os
import subprocess

import pytest

from rocmpatch import launchers
from rocmpatch.errors import EnvironmentProblem, UsageError
from tests import fake_torchrun

# Each would change what runs if a shell saw it unquoted: expansion, brace expansion, word splitting,
# command substitution, a positional parameter, globbing, a line break.
NASTY = ["$HOME", "x{,--load=/evil}", "a${IFS}b", "$(touch pwned)", "`touch pwned`", "/d/$1/x", "*", "two words",
         "line\nbreak", "it's", '"quoted"', "tab\there", "--flag=$PATH", "~", ""]


def test_the_vector_is_what_was_given_and_the_line_runs_the_same(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    launch = launchers.torchrun(["/tree $X/pretrain_gpt.py", *NASTY], nproc=2, env={"CUDA_VISIBLE_DEVICES": ""})
    assert launch.vector() == ["torchrun", "--standalone", "--nproc-per-node", "2", "/tree $X/pretrain_gpt.py", *NASTY]
    assert launchers.run(launch) == 0
    subprocess.run(["bash", "-c", launch.line()], check=True)
    subprocess.run(["sh", "-c", launch.line()], check=True)
    direct, bash, sh = fake_torchrun.calls(record)
    assert direct == bash == sh == {"argv": launch.vector()[1:], "env": {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": None,
                                                                       "CUDA_DEVICE_MAX_CONNECTIONS": None}}
    assert not (tmp_path / "pwned").exists()


def test_node_values_are_left_to_each_nodes_shell_and_read_from_the_environment_when_run(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    launch = launchers.torchrun(["train.py", "$MASTER_ADDR"], nproc=8, nodes=2, slurm=True)
    assert '--rdzv-endpoint "$MASTER_ADDR:29500"' in launch.line() and "'$MASTER_ADDR'" in launch.line()
    assert launch.preamble[-1].startswith("export MASTER_ADDR=")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "node1")
    with pytest.raises(UsageError, match=r"\$SLURM_JOB_ID is not set"):
        launch.vector()
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    vector = launch.vector()
    assert vector[vector.index("--rdzv-id") + 1] == "42" and vector[vector.index("--rdzv-endpoint") + 1] == "node1:29500"
    assert vector[-1] == "$MASTER_ADDR"  # a value of the user's: never expanded
    fake_srun = tmp_path / "bin" / "srun"
    fake_srun.write_text('#!/bin/sh\nshift 4\nexec "$@"\n')  # srun --nodes N --ntasks-per-node 1 CMD...
    fake_srun.chmod(0o755)
    assert launchers.run(launch) == 0
    subprocess.run(["bash", "-c", launch.line()], check=True, env=os.environ)
    direct, pasted = fake_torchrun.calls(record)
    assert direct["argv"] == pasted["argv"] == vector[6:]  # after srun ... torchrun


def test_a_missing_program_is_an_environment_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="torchrun not found on PATH"):
        launchers.run(launchers.torchrun(["x.py"], nproc=1))
