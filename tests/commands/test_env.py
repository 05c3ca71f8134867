from __future__ import annotations

import json
import subprocess

from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.commands.env import run
from rocmpatch.env.facts import Gpu, Machine
from rocmpatch.errors import ExitCode
from tests.env.node import mi300x_node


def test_env_reads_the_real_machine():
    result = CliRunner().invoke(app, ["env", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {"torch", "gpus", "network", "recommendations", "notices"} <= set(doc)


def test_export_lines_are_valid_shell(tmp_path, capsys):
    machine = Machine(torch_version="2.7.0", hip_version="6.3", gpus=(Gpu(0, "AMD Instinct MI300X", "gfx942"),),
                      root=mi300x_node(tmp_path / "node", nics=2), environ={"GPU_MAX_HW_QUEUES": "4"})
    assert run(as_json=False, export=True, machine=machine) == ExitCode.OK
    text = capsys.readouterr().out
    assert "export GPU_MAX_HW_QUEUES=2  # always (now 4)" in text
    script = tmp_path / "env.sh"
    script.write_text(text + '\necho "$NCCL_IB_HCA|$HSA_NO_SCRATCH_RECLAIM"\n')
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "rdma0:1,rdma1:1|1"


def test_human_output_and_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["env"])
    assert result.exit_code == 0 and "recommended environment" in result.stdout
    result = CliRunner().invoke(app, ["env", "--json", "--export"])
    assert result.exit_code == ExitCode.USAGE
