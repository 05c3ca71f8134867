"""data-prepare: `rocmpatch data prepare` on the tree `rocmpatch apply` wrote from the mirror
(ROCMPATCH_TEST_UPSTREAM): HuggingFaceTokenizer where the tree's --tokenizer-type lists it,
else GPT2BPETokenizer with the trained folder's vocab.json/merges.txt; the tree's own
IndexedDataset reads back what the summary says; then the tiny Llama trains ten iterations on two
CPU processes on it, with the flags the summary printed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testkit import harness
from testkit.flags import TINY_LLAMA

# every_release: full tree only, so nothing in CI; a mirror run checks every release declaring data-prepare
pytestmark = [harness.releases_with("data-prepare"), pytest.mark.upstream, pytest.mark.every_release]
pytest.importorskip("torch")
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.data.prepared import FASTER, applied_tree, corpus, prepare, read_with_the_tree  # noqa: E402 (after the skips)

HF = "HuggingFaceTokenizer"


def tokenizer_types(tree) -> str:
    """The tree's tools/preprocess_data.py --help: its --tokenizer-type choices among the rest."""
    done = subprocess.run([sys.executable, "tools/preprocess_data.py", "--help"], cwd=tree, capture_output=True, text=True,
                          env=harness.clean_env(PYTHONPATH=str(tree)), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="session")
def tree(release, upstream_mirror, tmp_path_factory):
    return applied_tree(release.name, upstream_mirror, tmp_path_factory.mktemp("trees"))


def test_prepares_with_the_trees_tokenizer_and_trains(tree, tmp_path):
    harness.needs_training_tools()
    result, summary = prepare(tree, corpus(tmp_path / "corpus"), tmp_path / "data" / "docs")
    assert summary["documents"] == "80"
    if HF in tokenizer_types(tree):
        assert summary["--tokenizer-type"] == HF
        assert f"for rocmpatch recipe launch: --data-path {summary['prefix']} --tokenizer {summary['--tokenizer-model']}" in result.stdout
    else:
        assert summary["--tokenizer-type"] == "GPT2BPETokenizer" and "recipe launch" not in result.stdout
        assert summary["--vocab-file"] == f"{tmp_path}/data/docs_tokenizer/vocab.json"
    assert read_with_the_tree(tree, summary["--data-path"]) == (int(summary["documents"]), int(summary["tokens"]))
    data = [item for flag, value in summary.items() if flag.startswith("--") for item in (flag, value)]
    mock = {"--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512"}
    base = [flag for flag in TINY_LLAMA if flag not in mock]
    run = harness.trains_on_cpu(tree, *data, "--split", "98,2,0", *FASTER, iters=10, base=base)
    harness.assert_learns(run.losses, 10)
    print(f"\n{tree.name}: data prepare {summary['documents']} documents, {summary['tokens']} tokens "
          f"({summary['--tokenizer-type']}); trained loss {run.losses[1]:.4f} -> {run.losses[10]:.4f}")
