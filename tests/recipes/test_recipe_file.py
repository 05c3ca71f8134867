"""A recipe file a user edited is checked whole before anything runs: each bad value is one line
naming the file, the line and the key, with the fix, exit 3 (rocmpatch/recipes/schema.py). Checked
through `recipe launch` (a fake torchrun on PATH proves nothing started) and `recipe show`."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from rocmpatch.recipes.catalog import find
from tests import fake_torchrun

# A bundled recipe with one release named, so the cases below can edit that line.
GOOD = re.sub(r"^releases: .*$", "releases: [core_v0.19.0]", find("small-radeon").path.read_text(), count=1, flags=re.M)
# The first layout (1gpu) and the second (8gpu) as written in small-radeon.yaml.
FIRST_LAYOUT = "  - name: 1gpu\n    nodes: 1\n    gpus_per_node: 1\n"
SECOND_TP = "      --micro-batch-size: 4\n"

# name -> (old text, new text, the key the error names, a word of the problem)
CASES = {
    "non-integer": ("  --num-layers: 24\n", "  --num-layers: 24.5\n", "args.--num-layers", "integer"),
    "huge-expression": ("  --num-layers: 24\n", "  --num-layers: 10**400\n", "args.--num-layers", "integer"),
    "huge-literal": ("  --hidden-size: 1024\n", "  --hidden-size: 1" + "0" * 400 + "\n", "args.--hidden-size", "digits"),
    "huge-vocab": ("vocab_size: 32000", "vocab_size: 1" + "0" * 400, "vocab_size", "digits"),
    "zero-gpus": (FIRST_LAYOUT, FIRST_LAYOUT.replace("gpus_per_node: 1", "gpus_per_node: 0"), "layouts[0].gpus_per_node", "0"),
    "list-for-nodes": (FIRST_LAYOUT, FIRST_LAYOUT.replace("nodes: 1\n", "nodes: [1]\n"), "layouts[0].nodes", "list"),
    "list-for-a-flag": ("  --hidden-size: 1024\n", "  --hidden-size: [1024]\n", "args.--hidden-size", "list"),
    "bool-for-a-size": ("  --seq-length: 2048\n", "  --seq-length: true\n", "args.--seq-length", "integer"),
    "nan-memory": ("    gpu_memory_gb: 16\n    tokens_per_second: null  # not measured yet\n",
                   "    gpu_memory_gb: .nan\n    tokens_per_second: null  # not measured yet\n", "layouts[0].gpu_memory_gb", "range"),
    "duplicate-key": ("  --num-layers: 24\n", "  --num-layers: 24\n  --num-layers: 48\n", "--num-layers", "duplicate"),
    "tp-zero": ("      --tensor-model-parallel-size: 1\n      --pipeline-model-parallel-size: 1\n      --micro-batch-size: 2\n",
                "      --tensor-model-parallel-size: 0\n      --pipeline-model-parallel-size: 1\n      --micro-batch-size: 2\n",
                "layouts[0].args.--tensor-model-parallel-size", "integer"),
    "tp-not-dividing": (SECOND_TP, SECOND_TP + "      --context-parallel-size: 3\n", "layouts[1]", "not a multiple"),
    "bad-release": ("releases: [core_v0.19.0]", "releases: [core_v0.19.0, {a: 1}]", "releases[1]", "release name"),
    "flag-not-a-flag": ("  --num-layers: 24\n", "  --num-layers: 24\n  num-heads: 2\n", "args.num-heads", "not a flag"),
}


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


@pytest.fixture
def torchrun_calls(tmp_path, monkeypatch):
    return fake_torchrun.install(tmp_path / "bin", monkeypatch)


@pytest.mark.parametrize("case", CASES)
def test_a_bad_value_is_one_line_naming_file_line_and_key_before_anything_runs(tmp_path, torchrun_calls, case):
    old, new, key, word = CASES[case]
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    (tmp_path / "pretrain_gpt.py").write_text("")
    named = new.rfind(key.rsplit(".", 1)[-1])  # the line of the key the error names (the last, for a duplicate)
    changed = line_of(text, new) + (new[:named].count("\n") if named >= 0 else 0)
    for command in (["launch", str(path), "-t", str(tmp_path), "--mock-data", "--gpus-per-node", "1"], ["show", str(path)]):
        result = CliRunner().invoke(app, ["recipe", *command])
        assert result.exit_code == ExitCode.INVALID_INPUT, (case, result.output)
        first = result.stderr.splitlines()[0]
        match = re.match(rf"rocmpatch: error: {re.escape(str(path))}:(\d+): (?:(\S+): )?", first)
        assert match, first
        assert (match[2] == key or f"key {key!r}" in first) and word in first, first
        if case not in ("tp-not-dividing",):  # a layout's problem is at the layout
            assert int(match[1]) == changed, (first, changed)
        assert result.stdout == "" and len(result.stderr.splitlines()) <= 2
    assert not torchrun_calls.exists()


def test_non_utf8_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_bytes(GOOD.encode().replace(b"summary: ", b"summary: \xff\xfe ", 1))
    result = CliRunner().invoke(app, ["recipe", "show", str(path)])
    assert result.exit_code == ExitCode.INVALID_INPUT and str(path) in result.stderr and "UTF-8" in result.stderr


def test_the_old_release_key_still_reads_and_both_are_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD.replace("releases: [core_v0.19.0]", "release: core_v0.19.0"))
    assert find(str(path)).releases.items == ("core_v0.19.0",)
    path.write_text(GOOD.replace("releases: [core_v0.19.0]", "releases: [core_v0.19.0]\nrelease: core_v0.19.0"))
    result = CliRunner().invoke(app, ["recipe", "show", str(path)])
    assert result.exit_code == ExitCode.INVALID_INPUT and "releases" in result.stderr.splitlines()[0]


@pytest.mark.parametrize("after, word", [(("--tensor-model-parallel-size", "0"), "integer"), (("--num-layers", "1e3"), "integer"),
                                         (("--tensor-model-parallel-size", "3"), "not a multiple")])
def test_flags_after_double_dash_are_checked_the_same_way(tmp_path, torchrun_calls, after, word):
    (tmp_path / "pretrain_gpt.py").write_text("")
    result = CliRunner().invoke(app, ["recipe", "launch", "small-radeon", "-t", str(tmp_path), "--mock-data", "--", *after])
    assert result.exit_code == ExitCode.USAGE and result.stderr.startswith("rocmpatch: error: after --: ")
    assert word in result.stderr and result.stdout == "" and not torchrun_calls.exists()
