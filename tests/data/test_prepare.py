"""`rocmpatch data prepare` at the command line, against a stand-in for the tree's
tools/preprocess_data.py (tests/data/stub_tree.py): what it passes the tree's script, what it
prints, exit codes and one-line refusals, and that a failure leaves nothing behind. The real script
of both releases: test_prepare_trains.py (full tree)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from tests.cli_process import ROOT, run_rocmpatch
from tests.data.stub_tree import make_tree

HF_AND_GPT2 = "GPT2BPETokenizer,HuggingFaceTokenizer,NullTokenizer"
GPT2_ONLY = "BertWordPieceCase,GPT2BPETokenizer,NullTokenizer"


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "Megatron-LM")


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "more").mkdir(parents=True)
    (folder / "a.txt").write_text("The first document.\n")
    (folder / "more" / "b.md").write_text("# A second one\n\nwith caf\u00e9 in it\n")
    (folder / "c.jsonl").write_text(json.dumps({"text": "third"}) + "\n" + json.dumps({"text": "  "}) + "\n"
                                    + json.dumps({"text": "fourth"}) + "\n")
    (folder / "README.csv").write_text("not a document\n")
    return folder


def prepare(tmp_path, *args, types=HF_AND_GPT2, fail=False):
    env = {"STUB_TOKENIZER_TYPES": types, "STUB_RECORD": str(tmp_path / "stub-args.json"), "STUB_FAIL": "1" if fail else None}
    return CliRunner().invoke(app, ["data", "prepare", *args], env=env)


def stub_args(tmp_path) -> dict:
    argv = json.loads((tmp_path / "stub-args.json").read_text())
    return {flag: argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
            for i, flag in enumerate(argv) if flag.startswith("--")}


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_documents_become_bin_and_idx_with_a_tokenizer_trained_on_them(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    out = tmp_path / "out" / "docs"
    result = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", "--vocab-size", "300")
    assert result.exit_code == 0, result.output
    texts = ["The first document.\n", "# A second one\n\nwith caf\u00e9 in it\n", "third", "fourth"]
    tokens = sum(len(t.encode()) + 1 for t in texts)  # the stub: a token per byte, and the end of document
    lines = result.stdout.splitlines()
    assert re.fullmatch(rf"wrote {out}_text_document.bin and .idx: 4 documents, {tokens} tokens \(uint16\), in [0-9.]+ s", lines[0])
    assert re.fullmatch(rf"tokenizer: {out}_tokenizer, a byte-level BPE of 2[0-9][0-9] tokens trained on this corpus "
                        r"\(a Hugging Face folder, with vocab.json and merges.txt\)", lines[3])  # at most 300: a tiny corpus has fewer merges
    assert lines[1:3] + lines[4:] == [
        "left out 1 empty document(s)",
        f"skipped 1 file(s) of other types or hidden (first: {corpus / 'README.csv'})",
        f"for rocmpatch recipe launch: --data-path {out}_text_document --tokenizer {out}_tokenizer",
        f"for pretrain_gpt.py: --data-path {out}_text_document --tokenizer-type HuggingFaceTokenizer --tokenizer-model {out}_tokenizer",
    ]
    assert listing(out.parent) == ["docs_text_document.bin", "docs_text_document.idx", "docs_tokenizer"]
    assert listing(out.parent / "docs_tokenizer") == ["merges.txt", "special_tokens_map.json", "tokenizer.json",
                                                        "tokenizer_config.json", "vocab.json"]
    passed = stub_args(tmp_path)
    assert passed["--tokenizer-type"] == "HuggingFaceTokenizer" and Path(passed["--tokenizer-model"]).is_absolute()
    assert passed["--append-eod"] is True and passed["--json-keys"] == "text" and passed["--workers"] == "1"
    progress = [line for line in result.stderr.splitlines() if line.startswith("data: ")]
    assert "data: read 4 documents" in progress and progress[-1] == "data: tokenized 4 of 4 documents"
    from transformers import AutoTokenizer  # the folder is what the tree's HuggingFaceTokenizer loads

    assert AutoTokenizer.from_pretrained(f"{out}_tokenizer").eos_token == "<|endoftext|>"


def test_a_tree_without_huggingface_tokenizer_gets_gpt2_files(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    out = tmp_path / "docs"
    result = prepare(tmp_path, str(corpus / "a.txt"), "-t", str(tree), "-o", str(out), "--train-tokenizer", types=GPT2_ONLY)
    assert result.exit_code == 0, result.output
    passed = stub_args(tmp_path)
    assert passed["--tokenizer-type"] == "GPT2BPETokenizer" and passed["--vocab-file"].endswith("/tokenizer/vocab.json")
    assert result.stdout.splitlines()[-1] == (f"for pretrain_gpt.py: --data-path {out}_text_document --tokenizer-type GPT2BPETokenizer "
                                              f"--vocab-file {out}_tokenizer/vocab.json --merge-file {out}_tokenizer/merges.txt")
    assert "recipe launch" not in result.stdout  # recipes pass HuggingFaceTokenizer
    # A given folder without GPT-2's files cannot work with that tree: one line, nothing written.
    from tokenizers import Tokenizer, models

    folder = tmp_path / "hf-only"  # loads as a Hugging Face tokenizer, has no vocab.json / merges.txt
    folder.mkdir()
    Tokenizer(models.WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="a")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    refused = prepare(tmp_path, str(corpus / "a.txt"), "-t", str(tree), "-o", str(tmp_path / "again"), "--tokenizer", str(folder), types=GPT2_ONLY)
    assert refused.exit_code == ExitCode.INVALID_INPUT
    assert refused.stderr.splitlines()[-2].startswith(f"rocmpatch: error: {folder}: no vocab.json and merges.txt: this tree's tokenizer is GPT2BPETokenizer")
    assert not list(tmp_path.glob("again*")) and not list(tmp_path.glob(".again*"))


def test_a_tree_that_takes_neither_tokenizer_is_refused(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    result = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(tmp_path / "d"), "--train-tokenizer", types="NullTokenizer")
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert "takes neither HuggingFaceTokenizer nor GPT2BPETokenizer (it lists: NullTokenizer)" in result.stderr
    assert listing(tmp_path) == ["Megatron-LM", "corpus"]


def test_the_scripts_failure_is_one_line_with_its_log_and_leaves_nothing(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    out = tmp_path / "new" / "folder" / "docs"
    result = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", types=GPT2_ONLY, fail=True)
    assert result.exit_code == ExitCode.CHECK_FAILED
    error, hint = result.stderr.splitlines()[-2:]
    assert error == f"rocmpatch: error: {tree.absolute()}/tools/preprocess_data.py failed: OSError: stub: the tokenizer files are gone"
    log = Path(hint.split("its whole output is in ")[1].split(";")[0])
    assert "Traceback (most recent call last)" in log.read_text() and hint.endswith("nothing was written")
    assert not (tmp_path / "new").exists()  # the folders it made for the output are gone too


def test_existing_outputs_are_kept_unless_force(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    out = tmp_path / "docs"
    Path(f"{out}_text_document.idx").write_text("old")
    result = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", types=GPT2_ONLY)
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.splitlines()[0] == f"rocmpatch: error: {out}_text_document.idx already exists; nothing was written"
    assert Path(f"{out}_text_document.idx").read_text() == "old"
    forced = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", "--force", types=GPT2_ONLY)
    assert forced.exit_code == 0, forced.output
    assert Path(f"{out}_text_document.idx").read_bytes().startswith(b"MMIDIDX")
    again = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", "--force", types=GPT2_ONLY)
    assert again.exit_code == 0 and listing(tmp_path).count("docs_tokenizer") == 1


@pytest.mark.parametrize("args, code, line", [
    (["{corpus}/missing.txt", "--train-tokenizer"], ExitCode.USAGE, "{corpus}/missing.txt: no such file or directory"),
    (["{corpus}/README.csv", "--train-tokenizer"], ExitCode.INVALID_INPUT, "{corpus}/README.csv: not a document file this command reads"),
    (["{corpus}/bad.jsonl", "--train-tokenizer"], ExitCode.INVALID_INPUT, "{corpus}/bad.jsonl:2: not JSON"),
    (["{corpus}/bad.jsonl", "--train-tokenizer", "--text-key", "body"], ExitCode.INVALID_INPUT, "{corpus}/bad.jsonl:1: no key 'body' (keys: text)"),
    (["{corpus}", "--tokenizer", "x", "--train-tokenizer"], ExitCode.USAGE, "give --tokenizer DIR|NAME or --train-tokenizer (one of them)"),
    (["{corpus}"], ExitCode.USAGE, "give --tokenizer DIR|NAME or --train-tokenizer (one of them)"),
    (["{corpus}", "--tokenizer", "./no/such/folder"], ExitCode.USAGE, "--tokenizer ./no/such/folder: no such folder"),
    (["{corpus}", "--tokenizer", "{corpus}/a.txt"], ExitCode.INVALID_INPUT, "{corpus}/a.txt: a file, not a tokenizer folder"),
    (["{corpus}", "--tokenizer", "x/y", "--vocab-size", "9"], ExitCode.USAGE, "--vocab-size goes with --train-tokenizer"),
    (["{corpus}", "--train-tokenizer", "--vocab-size", "9"], ExitCode.USAGE, "--vocab-size 9: at least 257"),
    (["--train-tokenizer"], ExitCode.USAGE, "no documents to prepare"),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path, tree, corpus, args, code, line):
    if "--train-tokenizer" in args and "--tokenizer" not in args:
        pytest.importorskip("tokenizers")
    (corpus / "bad.jsonl").write_text(json.dumps({"text": "fine"}) + "\n{oops\n")
    given = [a.format(corpus=corpus) for a in args]
    result = prepare(tmp_path, *given, "-t", str(tree), "-o", str(tmp_path / "out" / "d"))
    assert result.exit_code == code, result.output
    errors = [text for text in result.stderr.splitlines() if text.startswith("rocmpatch: error: ")]
    assert len(errors) == 1 and errors[0].startswith("rocmpatch: error: " + line.format(corpus=corpus)), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_tree_without_the_script_is_refused(tmp_path, corpus):
    result = prepare(tmp_path, str(corpus), "-t", str(tmp_path), "-o", str(tmp_path / "d"), "--train-tokenizer")
    assert result.exit_code == ExitCode.TARGET_REFUSED
    assert f"{tmp_path.absolute()}: has no tools/preprocess_data.py, so it is no Megatron-LM tree" in result.stderr


def test_a_hub_name_not_in_the_cache_is_refused_within_seconds_with_the_download_line(tmp_path, tree, corpus):
    pytest.importorskip("transformers")
    result = run_rocmpatch("data", "prepare", str(corpus), "-t", str(tree), "-o", str(tmp_path / "d"),
                           "--tokenizer", "meta-llama/Meta-Llama-3-8B", timeout=120,
                           env={"HF_HOME": str(tmp_path / "empty-hf-home"), "STUB_RECORD": str(tmp_path / "r.json")})
    assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
    error, hint = result.stderr.splitlines()[-2:]
    assert error.startswith("rocmpatch: error: tokenizer meta-llama/Meta-Llama-3-8B is not in the local Hugging Face cache, "
                            "and this command never downloads: it needs the network (and a token, HF_TOKEN, if the repository is gated) or a local folder")
    assert "hf download meta-llama/Meta-Llama-3-8B --include 'tokenizer*' --local-dir tokenizers/Meta-Llama-3-8B" in hint
    assert not (tmp_path / "r.json").exists()  # the tree's script never ran (its --help aside)


def test_a_folder_that_does_not_load_is_refused(tmp_path, tree, corpus):
    pytest.importorskip("transformers")
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text("{}")
    result = prepare(tmp_path, str(corpus), "-t", str(tree), "-o", str(tmp_path / "d"), "--tokenizer", str(folder))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert result.stderr.splitlines()[-2].startswith(f"rocmpatch: error: {folder}: not a Hugging Face tokenizer folder that loads offline (")


def test_a_missing_library_is_one_line_naming_the_pip_install(tmp_path, tree, corpus):
    """pyarrow for parquet, tokenizers for --train-tokenizer, datasets for --hf-dataset: shadowed here
    by modules that fail to import."""
    shadow = tmp_path / "shadow"
    for name in ("pyarrow", "tokenizers", "datasets"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f'raise ImportError("No module named {name}")\n')
    (corpus / "rows.parquet").write_bytes(b"PAR1")
    env = {"PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"}
    for args, line in (([str(corpus / "rows.parquet"), "--tokenizer", str(corpus)],
                        f"{corpus / 'rows.parquet'}: reading parquet needs pyarrow, which is not installed here: pip install pyarrow"),
                       ([str(corpus / "a.txt"), "--train-tokenizer"],
                        "--train-tokenizer needs the `tokenizers` library, which is not installed here: pip install tokenizers"),
                       (["--hf-dataset", "wikitext", "--tokenizer", str(corpus)],
                        "--hf-dataset wikitext needs the `datasets` library, which is not installed here: pip install datasets")):
        result = run_rocmpatch("data", "prepare", *args, "-t", str(tree), "-o", str(tmp_path / "d"), env=env)
        assert result.returncode == ExitCode.ENVIRONMENT, result.stderr
        assert result.stderr.splitlines()[0] == f"rocmpatch: error: {line}"


def test_progress_reaches_a_pipe_a_line_at_a_time(tmp_path, tree, corpus):
    """Not a terminal: one plain line per step and per 'Processed N documents' of the tree's script."""
    pytest.importorskip("tokenizers")
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(40)))
    result = run_rocmpatch("data", "prepare", str(many), "-t", str(tree), "-o", str(tmp_path / "d"), "--train-tokenizer",
                           env={"STUB_TOKENIZER_TYPES": GPT2_ONLY, "STUB_RECORD": str(tmp_path / "r.json")}, timeout=120)
    assert result.returncode == 0, result.stderr
    tokenized = [line for line in result.stderr.splitlines() if line.startswith("data: tokenized ")]
    assert tokenized == [f"data: tokenized {n} of 40 documents" for n in range(2, 41, 2)]


def test_ctrl_c_before_the_rename_leaves_nothing(tmp_path, tree, corpus):
    pytest.importorskip("tokenizers")
    out = tmp_path / "made" / "docs"
    result = run_rocmpatch("data", "prepare", str(corpus), "-t", str(tree), "-o", str(out), "--train-tokenizer", timeout=120,
                           env={"STUB_TOKENIZER_TYPES": GPT2_ONLY, "STUB_RECORD": str(tmp_path / "r.json"),
                                "ROCMPATCH_TEST_INTERRUPT_AT": "data-prepare-staged"})
    assert result.returncode == ExitCode.INTERRUPTED, result.stderr
    assert (tmp_path / "r.json").exists() and not (tmp_path / "made").exists()


def cached_hub_tokenizer(hf_home: Path, name: str) -> Path:
    """A tokenizer in a Hugging Face cache laid out as `hf download` leaves it (refs/main, a snapshot),
    with GPT-2's files too; nothing is downloaded."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    revision = "0" * 40
    repo = hf_home / "hub" / f"models--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    vocab = {chr(c): i for i, c in enumerate(range(33, 127))} | {"<|endoftext|>": 94}
    bpe = models.BPE(vocab, [], unk_token="<|endoftext|>")
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.save(str(snapshot / "tokenizer.json"))
    bpe.save(str(snapshot))
    (snapshot / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}')
    (repo / ".no_exist" / revision).mkdir(parents=True)  # what an online load records for a file the repository lacks
    (repo / ".no_exist" / revision / "config.json").write_text("")
    return snapshot


def test_a_hub_name_in_the_local_cache_is_used_offline(tmp_path, tree, corpus):
    pytest.importorskip("transformers")
    cached_hub_tokenizer(tmp_path / "hf", "example-org/tiny")
    out = tmp_path / "d"
    result = run_rocmpatch("data", "prepare", str(corpus / "a.txt"), "-t", str(tree), "-o", str(out), "--tokenizer", "example-org/tiny",
                           env={"HF_HOME": str(tmp_path / "hf"), "STUB_RECORD": str(tmp_path / "stub-args.json")}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert stub_args(tmp_path)["--tokenizer-model"] == "example-org/tiny"
    assert "tokenizer: example-org/tiny (95 tokens, loaded offline)" in result.stdout
    assert f"for rocmpatch recipe launch: --data-path {out}_text_document --tokenizer example-org/tiny" in result.stdout
