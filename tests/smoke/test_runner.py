"""The runner: child processes with timeouts, whole process groups stopped, results read back."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rocmpatch.releases import choose
from rocmpatch.smoke import blame
from rocmpatch.smoke.profile import load_profile
from rocmpatch.smoke.runner import Plan, run_stages
from rocmpatch.smoke.supervise import child_env, last_result, run_child
from tests.cli_process import default_sigint

ROOT = Path(__file__).resolve().parents[2]
A_RELEASE = choose(ROOT / "patchsets", None).location.series_dir  # any release's real profile will do: the default's


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_timeout_stops_the_child_and_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """)
    outcome = run_child([sys.executable, "-c", code], child_env(None), 3.0, tmp_path)
    assert outcome.timed_out and outcome.result is None
    assert "started" in outcome.tail
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild)


def test_crash_without_result_reports_signal_and_last_lines(tmp_path):
    code = "import os; print('about to crash', flush=True); os.abort()"
    outcome = run_child([sys.executable, "-c", code], child_env(None), 30.0, tmp_path)
    assert outcome.result is None and outcome.returncode < 0
    assert outcome.tail[-1] == "about to crash"


def test_result_is_the_last_json_status_line():
    lines = ["noise", '{"status": "failed", "detail": "old"}', '{"not": "a result"}',
             '{"status": "passed", "detail": "d"}', "trailing text"]
    assert last_result(lines) == {"status": "passed", "detail": "d"}
    assert last_result(["{broken", "x"]) is None


def test_hanging_stage_fails_with_timeout_and_later_stages_are_skipped(tmp_path):
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("import time\nprint('hanging', flush=True)\ntime.sleep(600)\n")
    plan = Plan(tree, device="cpu", stages=("import", "ops"), timeouts={"import": 4},
                profile=load_profile(A_RELEASE))
    start = time.monotonic()
    results = run_stages(plan)
    assert time.monotonic() - start < 20
    imported, ops = results
    assert imported.status == "failed" and "no result after 4s" in imported.detail
    assert "hanging" in imported.extra["last_output"]
    assert ops.status == "skipped" and ops.detail == "needs import, which failed"


def test_hint_names_the_trees_requirements_file(tmp_path):
    """Right after apply, 'No module named six': the tree's requirements.txt (0002) lists it."""
    (tmp_path / "requirements.txt").write_text("# training\nregex\nsix>=1.16  # tokenizers\npyyaml\n")
    text = blame.hint([], "six", False, {}, tmp_path)
    assert text.endswith(f"pip install -r {tmp_path / 'requirements.txt'}"), text
    assert "pip install -r" in blame.hint([], "yaml", False, {}, tmp_path)
    assert blame.hint([], "nltk", False, {}, tmp_path).endswith("pip install nltk")


def test_ctrl_c_stops_the_running_stage_and_exits_130(tmp_path):
    import signal
    import subprocess

    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    marker = tmp_path / "child.pid"
    (tree / "megatron" / "core" / "__init__.py").write_text(
        f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    code = ("import sys; from pathlib import Path; from rocmpatch.smoke.runner import Plan, run_stages, Interrupted\n"
            "from rocmpatch.smoke.profile import load_profile\n"
            "try:\n    run_stages(Plan(Path(sys.argv[1]), device='cpu', stages=('import', 'ops'),"
            " profile=load_profile(Path(sys.argv[2]))))\n"
            "except Interrupted as stop:\n    print([(r.name, r.status, r.detail) for r in stop.results]); sys.exit(130)\n")
    process = subprocess.Popen([sys.executable, "-c", code, str(tree), str(A_RELEASE)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env=child_env(None), preexec_fn=default_sigint)
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "('import', 'failed', 'interrupted (Ctrl-C); its processes were stopped')" in out
    assert "('ops', 'skipped', 'interrupted')" in out
    assert not alive(int(marker.read_text()))


def test_nothing_a_stage_started_outlives_it(tmp_path):
    """torchrun's workers run in sessions of their own: they must still be gone when the stage
    returns, even when the stage itself exited normally."""
    pid_file = tmp_path / "worker.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(worker.pid))
        print('{{"status": "passed"}}', flush=True)
    """)
    outcome = run_child([sys.executable, "-c", code], child_env(None), 30.0, tmp_path)
    assert outcome.result == {"status": "passed"}
    worker = int(pid_file.read_text())
    state = Path(f"/proc/{worker}/stat")
    assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_ctrl_c_as_a_stage_starts_leaves_nothing_running(tmp_path):
    """Ctrl-C while the stage's process is being started (the moment torchrun and its workers come
    up at the start of the train stage): the stage and whatever it starts, in sessions of their own
    too, are stopped; nothing with this run's token is left."""
    import signal
    import subprocess
    import uuid

    token = f"rocmpatch-test-{uuid.uuid4()}"
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text(textwrap.dedent("""
        import subprocess, sys, time
        for _ in range(3):  # torchrun and two workers, each in a session of its own
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        time.sleep(600)
    """))
    code = ("import sys; from pathlib import Path; from rocmpatch.smoke.runner import Plan, run_stages, Interrupted\n"
            "from rocmpatch.smoke.profile import load_profile\n"
            "try:\n    run_stages(Plan(Path(sys.argv[1]), device='cpu', stages=('import',), profile=load_profile(Path(sys.argv[2]))))\n"
            "except Interrupted as stop:\n    print([(r.name, r.status) for r in stop.results]); sys.exit(130)\n")
    env = {**child_env(None), "ROCMPATCH_TEST_TOKEN": token, "ROCMPATCH_TEST_INTERRUPT_AT": "smoke-child-started"}
    done = subprocess.run([sys.executable, "-c", code, str(tree), str(A_RELEASE)], cwd=ROOT, capture_output=True, text=True,
                          env=env, preexec_fn=default_sigint, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "('import', 'failed')" in done.stdout

    for _ in range(30):  # whatever the stage had started has had 3 s to show up
        time.sleep(0.1)
    assert running_with(token) == []


def test_ctrl_c_stops_what_a_stage_started_through_torchrun(tmp_path):
    """A stage that starts torchrun (its own run_child, a session of its own) and its workers, then
    is stopped by Ctrl-C of smoke: none of them is left running."""
    import signal
    import subprocess
    import uuid

    token = f"rocmpatch-test-{uuid.uuid4()}"
    ready = tmp_path / "workers.ready"
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from rocmpatch.smoke.supervise import child_env, run_child
        torchrun = ("import subprocess, sys, time\\n"
                    "for _ in range(2):\\n"
                    "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\\n"
                    "open({str(ready)!r}, 'w').write('up')\\n"
                    "time.sleep(600)\\n")
        run_child([sys.executable, "-c", torchrun], child_env(None), 600, Path("."))
    """))
    code = ("import sys; from pathlib import Path; from rocmpatch.smoke.runner import Plan, run_stages, Interrupted\n"
            "from rocmpatch.smoke.profile import load_profile\n"
            "try:\n    run_stages(Plan(Path(sys.argv[1]), device='cpu', stages=('import',), profile=load_profile(Path(sys.argv[2]))))\n"
            "except Interrupted:\n    sys.exit(130)\n")
    env = {**child_env(None), "ROCMPATCH_TEST_TOKEN": token}
    process = subprocess.Popen([sys.executable, "-c", code, str(tree), str(A_RELEASE)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=default_sigint)
    for _ in range(600):
        if ready.exists():
            break
        time.sleep(0.1)
    assert ready.exists(), "the stage never started its workers"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    time.sleep(1.0)
    assert running_with(token) == []


def running_with(token: str) -> list[int]:
    """Live processes whose environment holds ROCMPATCH_TEST_TOKEN=token."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and f"ROCMPATCH_TEST_TOKEN={token}".encode() in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_childs_steps_reach_the_runner_and_stay_out_of_its_output(tmp_path):
    from rocmpatch.smoke.child import STEP_MARKER

    code = (f"import sys; sys.stderr.write({STEP_MARKER!r} + 'importing torch\\n'); sys.stderr.flush(); "
            "print('work'); print('{\"status\": \"passed\", \"detail\": \"ok\"}')")
    steps: list[str] = []
    outcome = run_child([sys.executable, "-c", code], child_env(None), 30.0, tmp_path, steps.append)
    assert steps == ["importing torch"]
    assert outcome.result["status"] == "passed" and not any(STEP_MARKER in line for line in outcome.tail + outcome.stderr)


def test_each_line_reaches_on_line_as_it_comes(tmp_path):
    """The train stage shows Megatron's iterations while the run goes on (a pipe too): each line is
    handed over when printed, the first long before the child ends."""
    code = "import time; print('iteration 1', flush=True); time.sleep(3); print('{\"status\": \"passed\"}')"
    seen: list[tuple[str, float]] = []
    start = time.monotonic()
    run_child([sys.executable, "-c", code], child_env(None), 30.0, tmp_path,
              on_line=lambda line: seen.append((line, time.monotonic() - start)))
    assert [line for line, _ in seen] == ["iteration 1", '{"status": "passed"}']
    assert seen[1][1] - seen[0][1] > 2.0


def test_megatrons_iteration_lines_become_steps(capsys):
    from rocmpatch.smoke.child import STEP_MARKER
    from rocmpatch.smoke.train import iteration_steps

    on_line = iteration_steps("mcore", 10)
    on_line(" [2026-11-26 15:01:02] iteration        3/      10 | consumed samples: 24 | elapsed time per iteration (ms): "
            "812.5 | learning rate: 1.0E-04 | global batch size: 8 | lm loss: 8.296312E+00 |")
    on_line("an ordinary line")
    on_line("> building train, validation, and test datasets ...")
    assert capsys.readouterr().err.splitlines() == [f"{STEP_MARKER}mcore path: iteration 3/10, loss 8.296",
                                                    f"{STEP_MARKER}mcore path: building the datasets"]


def test_smoke_says_what_each_stage_does_in_plain_lines_when_not_a_terminal(tmp_path):
    """A log or CI sees one line per step, the first import's slowness explained, then each result."""
    pytest.importorskip("torch")  # smoke refuses to start without it
    from click.testing import CliRunner

    from rocmpatch.cli import app

    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("")
    result = CliRunner().invoke(app, ["smoke", "--target", str(tree), "--device", "cpu", "--json"])
    lines = result.stderr.splitlines()
    started = lines.index(next(line for line in lines if line.startswith("smoke: environment: importing torch and")))
    assert any("importing torch (the first import in a new environment can take a few minutes" in line
               for line in lines[started:])
    assert any(line.startswith("smoke: environment passed") for line in lines)


def test_gpus_on_a_machine_running_on_cpu_ends_with_a_hint_line(tmp_path):
    """`smoke --gpus 0,1` where the stages run on the CPU: the table, then one line saying what to do."""
    import pytest
    from click.testing import CliRunner

    from rocmpatch.cli import app

    torch = pytest.importorskip("torch")
    tree = tmp_path / "tree"
    (tree / "megatron" / "core").mkdir(parents=True)
    (tree / "megatron" / "core" / "__init__.py").write_text("")
    runs = {"cpu": "drop --gpus, or drop --device cpu to use GPUs"}
    if not torch.cuda.is_available():
        runs["auto"] = "drop --gpus to run every stage on the CPU; torch sees no GPU here"
    for device, expected in runs.items():
        result = CliRunner().invoke(app, ["smoke", "--target", str(tree), "--gpus", "0,1", "--device", device])
        assert result.exit_code == 1, result.output
        assert "--gpus 0,1 given, but running on CPU" in result.stdout
        hints = [line for line in result.stderr.splitlines() if line.startswith("smoke: environment: hint: ")]
        assert len(hints) == 1 and expected in hints[0], result.stderr
