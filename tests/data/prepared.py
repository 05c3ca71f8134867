"""`rocmpatch data prepare` on a real tree, for the release folders' tests that then train on what
it wrote (tests/series/<release>/test_data_prepare.py): a release applied with `rocmpatch apply`
from the mirror (ROCMPATCH_TEST_UPSTREAM), a corpus of this repository's own docs cut into
paragraphs (one document each, so the same bytes for every release), a byte-level BPE trained on it,
and the index read back with the tree's own IndexedDataset against the summary the command printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import ROOT, run_rocmpatch

VOCAB = "512"  # a small embedding: most of a tiny model's CPU time is the vocabulary
FASTER = ["--lr", "1e-2", "--min-lr", "1e-3"]  # real text falls slower than mock data: ten steps must show it
DOCUMENTS = 80  # enough for a validation split of 2% (an empty split makes Megatron count epochs forever)


def applied_tree(release: str, mirror: Path, root: Path) -> Path:
    """`rocmpatch apply --release RELEASE` into ROOT/RELEASE; skips on a machine with a GPU."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("these runs check the CPU path; this machine has a GPU")
    target = root / release
    result = run_rocmpatch("apply", "--target", str(target), "--release", release, "--upstream-url", str(mirror), timeout=600)
    assert result.returncode == 0, result.stderr
    return target


def corpus(directory: Path) -> list[str]:
    """DOCUMENTS text files: the paragraphs of this repository's docs/*.md, one per file."""
    paragraphs = [p.strip() for doc in sorted((ROOT / "docs").glob("*.md"))
                  for p in doc.read_text(encoding="utf-8").split("\n\n") if len(p.strip()) > 300]
    assert len(paragraphs) >= DOCUMENTS, len(paragraphs)
    directory.mkdir(parents=True, exist_ok=True)
    for index, text in enumerate(paragraphs[:DOCUMENTS]):
        (directory / f"{index:03d}.txt").write_text(text + "\n", encoding="utf-8")
    return sorted(str(p) for p in directory.glob("*.txt"))


def prepare(tree: Path, inputs: list[str], output: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The command, through a pipe as a log would get it; returns it and its summary's values."""
    result = run_rocmpatch("data", "prepare", *inputs, "--target", str(tree), "--output", str(output),
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
