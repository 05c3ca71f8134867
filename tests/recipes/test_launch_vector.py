"""`recipe launch` runs exactly what it was given: torchrun gets the argument vector with every value
as the user wrote it (no shell between), and the --dry-run line, pasted into a shell, runs the same
vector. A fake torchrun on PATH records both."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from rocmpatch.data import tokenizer as tokenizers
from tests import fake_torchrun
from tests.data.indexed import write_pair

TARGET_NAME = "t $HOME{,--load=evil} $IFS"
DATA = "d/$1 x{,--load=/evil}\n$IFS`touch pwned`"  # its .bin/.idx are made in the current directory
TOKENIZER = "$(touch pwned) tok"
EXTRA = ["--custom-flag", "a b\nc", "--wandb-exp-name", "${SAVE:-7}"]


def launch(*args):
    return CliRunner().invoke(app, ["recipe", "launch", *args])


def value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_values_reach_torchrun_unchanged_and_the_dry_run_line_runs_the_same_vector(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    monkeypatch.chdir(tmp_path)
    target = tmp_path / TARGET_NAME
    target.mkdir()
    (target / "pretrain_gpt.py").write_text("")
    write_pair(tmp_path / DATA, documents=100)
    tokenizers.train(["a few words", "to train on"], 300, tmp_path / TOKENIZER)  # the launch loads it offline first
    args = ["small-radeon", "-t", str(target), "--gpus-per-node", "1", "--data-path", DATA, "--tokenizer", TOKENIZER,
            "--save", "ckpt {a,b}", "--", *EXTRA]
    ran = launch(*args)
    assert ran.exit_code == 0, ran.output
    [call] = fake_torchrun.calls(record)
    argv = call["argv"]
    assert argv[:4] == ["--standalone", "--nproc-per-node", "1", str(target / "pretrain_gpt.py")]
    assert call["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"  # a GPU run: what upstream asserts on CUDA with TP/CP
    assert value(argv, "--data-path") == DATA and value(argv, "--tokenizer-model") == TOKENIZER
    assert value(argv, "--save") == value(argv, "--load") == "ckpt {a,b}"
    assert value(argv, "--custom-flag") == "a b\nc" and value(argv, "--wandb-exp-name") == "${SAVE:-7}"
    assert "--load=evil" not in argv and "--load=/evil" not in argv

    printed = launch(*args[:1], "--dry-run", *args[1:])
    assert printed.exit_code == 0 and printed.stdout.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ")
    assert shlex.split(printed.stdout) == ["CUDA_DEVICE_MAX_CONNECTIONS=1", "torchrun", *argv]
    subprocess.run(["bash", "-c", printed.stdout], check=True)
    assert fake_torchrun.calls(record)[1] == call
    assert not (tmp_path / "pwned").exists()


def test_cpu_hides_the_gpus_in_the_programs_environment(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    (tmp_path / "pretrain_gpt.py").write_text("")
    assert launch("llama3-8b", "-t", str(tmp_path), "--device", "cpu", "--mock-data").exit_code == 0
    [call] = fake_torchrun.calls(record)
    assert call["env"] == {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "CUDA_DEVICE_MAX_CONNECTIONS": None}
    assert call["argv"][:3] == ["--standalone", "--nproc-per-node", "2"]


def test_a_multi_node_run_needs_master_addr_and_no_torchrun_is_an_environment_problem(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    (tmp_path / "pretrain_gpt.py").write_text("")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    result = launch("llama3-8b", "-t", str(tmp_path), "--nodes", "2", "--mock-data")
    assert result.exit_code == ExitCode.USAGE and "$MASTER_ADDR is not set" in result.stderr and not record.exists()
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    assert launch("llama3-8b", "-t", str(tmp_path), "--nodes", "2", "--mock-data").exit_code == 0
    assert value(fake_torchrun.calls(record)[0]["argv"], "--rdzv-endpoint") == "10.0.0.1:29500"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    missing = launch("llama3-8b", "-t", str(tmp_path), "--mock-data")
    assert missing.exit_code == ExitCode.ENVIRONMENT and "torchrun not found" in missing.stderr


def test_empty_values_are_refused_not_passed(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    (tmp_path / "pretrain_gpt.py").write_text("")
    for args, option in ((("--data-path", "", "--tokenizer", "t"), "--data-path"), (("--mock-data", "--save", " "), "--save")):
        result = launch("llama3-8b", "-t", str(tmp_path), *args)
        assert result.exit_code == ExitCode.USAGE and option in result.stderr.splitlines()[0]
    assert not record.exists()
