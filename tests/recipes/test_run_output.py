"""What `recipe launch` shows of a run (issue 33): every line as it comes, stdout to stdout and stderr to
stderr, except Megatron's list of arguments, shown as one line; --log FILE keeps every line (and the
command that ran); a log inside the checkout is refused before anything starts. A torchrun on PATH that
prints as Megatron does stands in for the real one."""

from __future__ import annotations

import os
import sys

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode

MEGATRON = """#!{python}
import sys
print("using world size: 2")
print("------------------------ arguments ------------------------")
for name in ("adam_beta1", "hidden_size", "seq_length"):
    print("  " + name + " " + "." * 20 + " 1")
print("-------------------- end of arguments ---------------------")
print("WARNING: Transformer Engine and apex are not installed", file=sys.stderr)
print(" iteration        1/       2 | lm loss: 8.3E+00 |")
sys.exit({code})
"""


@pytest.fixture
def torchrun(tmp_path, monkeypatch):
    def install(code: int = 0) -> None:
        script = tmp_path / "bin" / "torchrun"
        script.parent.mkdir(exist_ok=True)
        script.write_text(MEGATRON.format(python=sys.executable, code=code))
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlm").mkdir()
    (tmp_path / "mlm" / "pretrain_gpt.py").write_text("")
    return install


def launch(*args):
    return CliRunner().invoke(app, ["recipe", "launch", "llama3-8b", "-t", "mlm", "--device", "cpu", "--mock-data", *args])


def test_the_argument_list_is_one_line_and_the_log_keeps_every_line(torchrun, tmp_path):
    torchrun()
    result = launch("--log", "logs/run.log")
    assert result.exit_code == ExitCode.OK, result.output
    assert result.stdout.splitlines() == ["using world size: 2", "Megatron's arguments: 3 lines (in logs/run.log)",
                                          " iteration        1/       2 | lm loss: 8.3E+00 |"]
    assert "WARNING: Transformer Engine and apex are not installed" in result.stderr.splitlines()
    log = (tmp_path / "logs" / "run.log").read_text().splitlines()
    assert log[0].startswith("running: ") and "pretrain_gpt.py" in log[0]
    assert "  hidden_size .................... 1" in log and " iteration        1/       2 | lm loss: 8.3E+00 |" in log

    again = launch("--log", "logs/run.log")  # a resumed run appends
    assert again.exit_code == ExitCode.OK and len((tmp_path / "logs" / "run.log").read_text().splitlines()) == 2 * len(log)


def test_without_a_log_the_fold_says_how_to_keep_it_and_a_failed_run_fails(torchrun):
    torchrun(code=1)
    result = launch()
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert "Megatron's arguments: 3 lines (not shown; --log FILE keeps every line)" in result.stdout.splitlines()


def test_a_log_inside_the_checkout_is_refused_before_anything_runs(torchrun, tmp_path):
    torchrun()
    result = launch("--log", "mlm/run.log")
    assert result.exit_code == ExitCode.USAGE
    [error] = [line for line in result.stderr.splitlines() if line.startswith("rocmpatch: error: ")]
    assert error.startswith("rocmpatch: error: --log mlm/run.log: inside the checkout mlm")
    assert not (tmp_path / "mlm" / "run.log").exists()


SLOW_MEGATRON = """#!{python}
import os, signal, sys, time
def stop(signum, frame):
    print("torchrun: stopping the workers", flush=True)
    sys.exit(1)
signal.signal(signal.SIGINT, stop)
open({pid_file!r}, "w").write(str(os.getpid()))
print(" iteration        1/      30 | lm loss: 8.3E+00 |", flush=True)
time.sleep(60)
"""


def test_ctrl_c_lets_torchrun_stop_its_workers_then_exits_130(tmp_path):
    """Ctrl-C (SIGINT to the foreground group, as a terminal sends it) reaches torchrun, which stops
    its workers and says so; rocmpatch shows that, then its own line, and exits 130."""
    import signal
    import subprocess
    import time

    from tests.cli_process import ROOT, default_sigint

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(SLOW_MEGATRON.format(python=sys.executable, pid_file=str(tmp_path / "torchrun.pid")))
    (bin_dir / "torchrun").chmod(0o755)
    (tmp_path / "mlm").mkdir()
    (tmp_path / "mlm" / "pretrain_gpt.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen([sys.executable, "-m", "rocmpatch", "recipe", "launch", "llama3-8b", "-t", "mlm", "--device", "cpu",
                                "--mock-data"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: (default_sigint(), os.setpgrp()))
    deadline = time.monotonic() + 60
    while not (tmp_path / "torchrun.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == ExitCode.INTERRUPTED, stderr
    assert stdout.splitlines()[-1] == "torchrun: stopping the workers"
    assert stderr.splitlines()[-1] == "rocmpatch: interrupted"
