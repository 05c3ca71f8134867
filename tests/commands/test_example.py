"""`rocmpatch example`: the launch script ships with rocmpatch (not inside the patched tree, where
examples/ is Megatron-LM's own)."""

from __future__ import annotations

import os

from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode


def test_example_prints_its_path_and_writes_a_copy(tmp_path):
    result = CliRunner().invoke(app, ["example"])
    assert result.exit_code == 0, result.output
    source = result.output.strip()
    assert source.endswith("pretrain_gpt_rocm.sh") and os.path.isfile(source)
    result = CliRunner().invoke(app, ["example", "--write", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    written = tmp_path / "run" / "pretrain_gpt_rocm.sh"
    assert written.read_bytes() == open(source, "rb").read() and os.access(written, os.X_OK)
    again = CliRunner().invoke(app, ["example", "--write", str(tmp_path / "run")])
    assert again.exit_code == ExitCode.USAGE and "already exists" in again.output
