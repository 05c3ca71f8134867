"""`rocmpatch data prepare` on the patched tree: no HuggingFaceTokenizer there, so GPT2BPETokenizer with the
trained folder's vocab.json/merges.txt; then a tiny GPT trains ten iterations on one CPU process on it."""

from __future__ import annotations

import pytest

from tests.data.prepared import FASTER, applied_tree, corpus, prepare, read_with_the_tree

pytestmark = pytest.mark.upstream
pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.series.core_v0_5_0.test_part2_training import ITERATION, TINY_GPT, needs_dataset_helpers, run_pretrain_gpt
from tests.series.core_v0_5_0.trees import RELEASE


@pytest.fixture(scope="module")
def tree(upstream_mirror, tmp_path_factory):
    return applied_tree(RELEASE, upstream_mirror, tmp_path_factory.mktemp("trees"))


def test_prepares_with_gpt2_bpe_and_trains(tree, tmp_path):
    needs_dataset_helpers()
    result, summary = prepare(tree, corpus(tmp_path / "corpus"), tmp_path / "docs")
    assert summary["--tokenizer-type"] == "GPT2BPETokenizer" and "recipe launch" not in result.stdout
    assert summary["--vocab-file"] == f"{tmp_path}/docs_tokenizer/vocab.json"
    assert read_with_the_tree(tree, summary["--data-path"]) == (int(summary["documents"]), int(summary["tokens"]))
    mock = {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128"}
    args = [flag for flag in TINY_GPT if flag not in mock] + [
        "--data-path", summary["--data-path"], "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", summary["--vocab-file"], "--merge-file", summary["--merge-file"]]
    args[args.index("--train-iters") + 1] = "10"
    args[args.index("--split") + 1] = "98,2,0"  # 1/1000 of 80 documents is none (see prepared.DOCUMENTS)
    args += FASTER
    proc = run_pretrain_gpt(tree, args)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    losses = {int(m[1]): float(m[4]) for m in ITERATION.finditer(output)}
    assert sorted(losses) == list(range(1, 11)) and losses[10] < losses[1] - 0.1, losses
