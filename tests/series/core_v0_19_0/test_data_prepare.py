"""`rocmpatch data prepare` on the patched tree: HuggingFaceTokenizer (the tree's preprocess_data.py lists it),
then a tiny Llama trains ten iterations on two CPU processes on what it wrote."""

from __future__ import annotations

import pytest

from tests.data.prepared import FASTER, applied_tree, corpus, prepare, read_with_the_tree

pytestmark = pytest.mark.upstream
pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.series.core_v0_19_0.harness import RELEASE
from tests.series.core_v0_19_0.test_training import TINY_LLAMA, assert_learns, pretrain_gpt


@pytest.fixture(scope="module")
def tree(upstream_mirror, tmp_path_factory):
    return applied_tree(RELEASE, upstream_mirror, tmp_path_factory.mktemp("trees"))


def test_prepares_with_huggingface_tokenizer_and_trains(tree, tmp_path):
    result, summary = prepare(tree, corpus(tmp_path / "corpus"), tmp_path / "data" / "docs")
    assert summary["--tokenizer-type"] == "HuggingFaceTokenizer" and summary["documents"] == "80"
    assert f"for rocmpatch recipe launch: --data-path {summary['prefix']} --tokenizer {summary['--tokenizer-model']}" in result.stdout
    assert read_with_the_tree(tree, summary["--data-path"]) == (int(summary["documents"]), int(summary["tokens"]))
    mock = {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512"}
    base = [flag for flag in TINY_LLAMA if flag not in mock]
    losses, _ = pretrain_gpt(tree, "--data-path", summary["--data-path"], "--tokenizer-type", "HuggingFaceTokenizer",
                             "--tokenizer-model", summary["--tokenizer-model"], "--split", "98,2,0", *FASTER, iters=10, base=base)
    assert_learns(losses, 10)


