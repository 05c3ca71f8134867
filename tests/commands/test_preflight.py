from __future__ import annotations

from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode


def invoke(*args):
    return CliRunner().invoke(app, ["preflight", *args])


def test_prints_the_launch_line_for_one_node_many_nodes_and_slurm():
    assert invoke("--gpus-per-node", "8").stdout.strip() == "torchrun --standalone --nproc-per-node 8 -m rocmpatch.preflight"
    lines = invoke("--nodes", "2", "--gpus-per-node", "4", "--min-busbw", "40").stdout.strip().splitlines()
    assert lines[-1] == ("torchrun --nnodes 2 --nproc-per-node 4 --rdzv-id rocmpatch-preflight --rdzv-backend c10d "
                         "--rdzv-endpoint \"$MASTER_ADDR:29500\" -m rocmpatch.preflight --min-busbw 40")
    slurm = invoke("--nodes", "2", "--slurm").stdout
    assert "srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2" in slurm and "--rdzv-id \"$SLURM_JOB_ID\"" in slurm
    assert "scontrol show hostnames" in slurm


def test_run_is_for_this_node_only():
    result = invoke("--run", "--nodes", "2")
    assert result.exit_code == ExitCode.USAGE


def test_json_file_goes_to_the_workers_and_gpus_is_a_deprecated_count():
    """`rocmpatch preflight --json FILE` works as the docs say (rank 0 writes FILE); --gpus N still
    works as a count, with a warning naming --gpus-per-node (smoke's --gpus takes indices)."""
    result = invoke("--gpus", "2", "--json", "report.json")
    assert result.exit_code == 0
    assert result.stdout.strip() == "torchrun --standalone --nproc-per-node 2 -m rocmpatch.preflight --json report.json"
    assert "--gpus-per-node 2" in result.stderr


def test_without_a_count_the_line_matches_this_machine():
    """No --gpus-per-node: the GPUs torch sees here; on a machine without any, the 2 CPU processes --run
    would start (said on stderr), and 8 per node for a line meant for other nodes (--nodes, --slurm)."""
    import pytest

    torch = pytest.importorskip("torch")
    here = invoke()
    assert here.exit_code == 0
    if torch.cuda.is_available():
        assert f"--nproc-per-node {torch.cuda.device_count()} " in here.stdout
        return
    assert here.stdout.strip() == "torchrun --standalone --nproc-per-node 2 -m rocmpatch.preflight"
    assert "no GPU visible to torch here: 2 processes on the CPU over gloo" in here.stderr
    assert "--device cpu" in invoke("--device", "cpu").stdout and "--nproc-per-node 2 " in invoke("--device", "cpu").stdout
    nodes = invoke("--nodes", "2")
    assert "--nproc-per-node 8 " in nodes.stdout and "--nproc-per-node 8 for the nodes it runs on" in nodes.stderr
