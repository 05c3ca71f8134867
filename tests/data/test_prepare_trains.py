"""`rocmpatch data prepare` on the real trees, then training on what it wrote: both releases applied
with `rocmpatch apply` from the mirror (ROCMPATCH_TEST_UPSTREAM), the tree's own Markdown docs as the
corpus (core_v0.19.0's, for both), a byte-level BPE trained on it; core_v0.19.0 tokenizes with HuggingFaceTokenizer and trains
a tiny Llama on two CPU processes, core_v0.5.0 (no HuggingFaceTokenizer) with GPT2BPETokenizer and
the folder's vocab.json/merges.txt, one process. The index is also read with the tree's own
IndexedDataset, against the summary the command printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_rocmpatch

pytestmark = pytest.mark.upstream
pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

VOCAB = "512"  # a small embedding: most of a tiny model's CPU time is the vocabulary
FASTER = ["--lr", "1e-2", "--min-lr", "1e-3"]  # real text falls slower than mock data: ten steps must show it


@pytest.fixture(scope="module")
def trees(upstream_mirror, tmp_path_factory) -> dict[str, Path]:
    import torch

    if torch.cuda.is_available():
        pytest.skip("these runs check the CPU path; this machine has a GPU")
    root = tmp_path_factory.mktemp("trees")
    made = {}
    for release in ("core_v0.19.0", "core_v0.5.0"):
        target = root / release
        result = run_rocmpatch("apply", "--target", str(target), "--release", release, "--upstream-url", str(upstream_mirror), timeout=600)
        assert result.returncode == 0, result.stderr
        made[release] = target
    return made


def corpus(trees: dict[str, Path]) -> list[str]:
    """core_v0.19.0's docs: 60 Markdown files (core_v0.5.0 has 2: too few for a validation split,
    and an empty split makes Megatron count epochs forever)."""
    return sorted(str(p) for p in (trees["core_v0.19.0"] / "docs").rglob("*.md"))


def prepare(trees: dict[str, Path], release: str, output: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The command, through a pipe as a log would get it; returns it and its summary's values."""
    tree = trees[release]
    result = run_rocmpatch("data", "prepare", *corpus(trees), "--target", str(tree), "--output", str(output),
                           "--train-tokenizer", "--vocab-size", VOCAB, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"^wrote (\S+)\.bin and \.idx: (\d+) documents, (\d+) tokens \((\w+)\)", result.stdout, re.M)
    assert found, result.stdout
    tokenized = [line for line in result.stderr.splitlines() if line.startswith("data: tokenized ")]
    assert tokenized and tokenized[-1] == f"data: tokenized {found[2]} of {found[2]} documents", result.stderr
    flags = result.stdout.splitlines()[-1].split("for pretrain_gpt.py: ", 1)[1].split()
    return result, {"prefix": found[1], "documents": found[2], "tokens": found[3], "dtype": found[4],
                    **{flags[i]: flags[i + 1] for i in range(0, len(flags), 2)}}


def read_with_the_tree(tree: Path, prefix: str) -> tuple[int, int]:
    """(documents, tokens) as the tree's own megatron.core.datasets.indexed_dataset reads them."""
    code = ("import sys; from megatron.core.datasets import indexed_dataset as m\n"
            "D = getattr(m, 'IndexedDataset', None) or m.MMapIndexedDataset  # the older name\n"
            "d = D(sys.argv[1]); print(len(d.document_indices) - 1, int(d.sequence_lengths.sum()))")
    done = subprocess.run([sys.executable, "-c", code, prefix], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    documents, tokens = done.stdout.split()[-2:]
    return int(documents), int(tokens)


def test_core_v0_19_0_prepares_with_huggingface_tokenizer_and_trains(trees, tmp_path):
    from tests.series.core_v0_19_0.test_training import TINY_LLAMA, assert_learns, pretrain_gpt

    tree = trees["core_v0.19.0"]
    result, summary = prepare(trees, "core_v0.19.0", tmp_path / "data" / "docs")
    assert summary["--tokenizer-type"] == "HuggingFaceTokenizer" and summary["documents"] == str(len(corpus(trees)))
    assert f"for rocmpatch recipe launch: --data-path {summary['prefix']} --tokenizer {summary['--tokenizer-model']}" in result.stdout
    assert read_with_the_tree(tree, summary["--data-path"]) == (int(summary["documents"]), int(summary["tokens"]))
    mock = {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512"}
    base = [flag for flag in TINY_LLAMA if flag not in mock]
    losses, _ = pretrain_gpt(tree, "--data-path", summary["--data-path"], "--tokenizer-type", "HuggingFaceTokenizer",
                             "--tokenizer-model", summary["--tokenizer-model"], "--split", "98,2,0", *FASTER, iters=10, base=base)
    assert_learns(losses, 10)


def test_core_v0_5_0_prepares_with_gpt2_bpe_and_trains(trees, tmp_path):
    from tests.series.core_v0_5_0.test_part2_training import ITERATION, TINY_GPT, needs_dataset_helpers, run_pretrain_gpt

    tree = trees["core_v0.5.0"]
    needs_dataset_helpers()
    result, summary = prepare(trees, "core_v0.5.0", tmp_path / "docs")
    assert summary["--tokenizer-type"] == "GPT2BPETokenizer" and "recipe launch" not in result.stdout
    assert summary["--vocab-file"] == f"{tmp_path}/docs_tokenizer/vocab.json"
    assert read_with_the_tree(tree, summary["--data-path"]) == (int(summary["documents"]), int(summary["tokens"]))
    mock = {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128"}
    args = [flag for flag in TINY_GPT if flag not in mock] + [
        "--data-path", summary["--data-path"], "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", summary["--vocab-file"], "--merge-file", summary["--merge-file"]]
    args[args.index("--train-iters") + 1] = "10"
    args[args.index("--split") + 1] = "98,2,0"  # 1/1000 of 60 documents is none (see corpus)
    args += FASTER
    proc = run_pretrain_gpt(tree, args)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    losses = {int(m[1]): float(m[4]) for m in ITERATION.finditer(output)}
    assert sorted(losses) == list(range(1, 11)) and losses[10] < losses[1] - 0.1, losses
