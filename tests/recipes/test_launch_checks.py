"""`recipe launch` checks what Megatron would stumble on before torchrun starts (issue 33): the data
files, the tokenizer loaded offline, the warmup against the run's length, the device, the processes
against the GPUs and the parallel sizes the flags after `--` set. Each refusal is one line with the fix
and a documented exit code; a fake torchrun on PATH proves nothing was started."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rocmpatch.cli import app
from rocmpatch.errors import ExitCode
from tests import fake_torchrun
from tests.data.indexed import write_pair


@pytest.fixture
def calls(tmp_path, monkeypatch):
    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlm").mkdir()
    (tmp_path / "mlm" / "pretrain_gpt.py").write_text("")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # no tokenizer in the cache
    return lambda: fake_torchrun.calls(record)


def launch(*args):
    return CliRunner().invoke(app, ["recipe", "launch", "small-radeon", "-t", "mlm", *args])


def refused(result, code, line: str) -> str:
    """The error line (asserted to start with `line`) and the hint."""
    assert result.exit_code == code, result.output
    errors = [text for text in result.stderr.splitlines() if text.startswith("rocmpatch: error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"rocmpatch: error: {line}"), result.stderr
    return result.stderr.split("  hint: ", 1)[1] if "  hint: " in result.stderr else ""


def value(argv, flag):
    return argv[argv.index(flag) + 1]


def data(tmp_path, prefix: str, documents: int = 100) -> str:
    """A .bin/.idx pair of `documents` documents (100: enough for every recipe's split)."""
    write_pair(tmp_path / prefix, documents)
    return prefix


def test_data_files_are_checked_first(tmp_path, calls):
    hint = refused(launch("--data-path", "data/corpus", "--tokenizer", "org/tok"), ExitCode.USAGE,
                   "--data-path data/corpus: no data/corpus.bin and no data/corpus.idx")
    assert "PREFIX_text_document" in hint
    data(tmp_path, "data/corpus_text_document")  # what `data prepare --output data/corpus` writes
    hint = refused(launch("--data-path", "data/corpus", "--tokenizer", "org/tok"), ExitCode.USAGE, "--data-path data/corpus: ")
    assert "did you mean data/corpus_text_document?" in hint
    (tmp_path / "data/corpus_text_document.idx").unlink()
    refused(launch("--data-path", "data/corpus_text_document", "--tokenizer", "org/tok"), ExitCode.USAGE,
            "--data-path data/corpus_text_document: no data/corpus_text_document.idx")
    data(tmp_path, "data/corpus_text_document")
    weighted = ("--", "--data-path", "0.3", "data/corpus_text_document", "0.7", "data/other.bin")
    hint = refused(launch("--tokenizer", "org/tok", *weighted), ExitCode.USAGE, "--data-path data/other.bin: no data/other.bin.bin")
    assert hint.startswith("give the prefix without .bin: data/other")
    refused(launch("--tokenizer", "org/tok", "--", "--train-data-path", "data/train"), ExitCode.USAGE, "--train-data-path data/train: no")
    assert calls() == []


def test_a_hub_tokenizer_not_in_the_cache_is_one_line_with_the_download_line(tmp_path, calls):
    prefix = data(tmp_path, "data/corpus_text_document")
    result = launch("--data-path", prefix, "--tokenizer", "meta-llama/Meta-Llama-3-8B")
    hint = refused(result, ExitCode.ENVIRONMENT, "tokenizer meta-llama/Meta-Llama-3-8B is not in the local Hugging Face cache")
    assert "it needs the network (and a token, HF_TOKEN, if the repository is gated) or a local folder" in result.stderr
    assert hint.startswith("where there is network: hf download meta-llama/Meta-Llama-3-8B --include 'tokenizer*' "
                           "--local-dir tokenizers/Meta-Llama-3-8B, then --tokenizer tokenizers/Meta-Llama-3-8B")
    assert calls() == []


def test_a_tokenizer_folder_that_does_not_load_is_refused(tmp_path, calls):
    pytest.importorskip("transformers")
    prefix = data(tmp_path, "data/corpus_text_document")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    refused(launch("--data-path", prefix, "--tokenizer", "tok"), ExitCode.INVALID_INPUT,
            "tok: not a Hugging Face tokenizer folder that loads offline (")
    assert calls() == []


def test_a_short_run_gets_a_warmup_that_fits_said_once(calls):
    result = launch("--device", "cpu", "--mock-data", "--", "--train-iters", "2")
    assert result.exit_code == 0, result.output
    [call] = calls()
    assert value(call["argv"], "--lr-warmup-iters") == "1" and value(call["argv"], "--train-iters") == "2"
    assert result.stderr.count("--lr-warmup-iters 2 (the recipe's) lowered to 1") == 1
    assert launch("--device", "cpu", "--mock-data", "--", "--train-iters", "3").exit_code == 0
    assert value(calls()[1]["argv"], "--lr-warmup-iters") == "2"  # fits: as the recipe says
    hint = refused(launch("--device", "cpu", "--mock-data", "--", "--train-iters", "2", "--lr-warmup-iters", "2"), ExitCode.USAGE,
                   "--lr-warmup-iters 2 is not below --train-iters 2")
    assert hint.startswith("give --lr-warmup-iters 1")
    refused(launch("--device", "cpu", "--mock-data", "--", "--lr-warmup-iters", "20", "--lr-decay-iters", "20"), ExitCode.USAGE,
            "--lr-warmup-iters 20 is not below --lr-decay-iters 20")
    assert len(calls()) == 2
    fraction = launch("--device", "cpu", "--mock-data", "--", "--lr-warmup-fraction", "0.1")
    assert fraction.exit_code == 0 and "--lr-warmup-iters" not in calls()[2]["argv"] and "--lr-warmup-iters" in fraction.stderr


def test_auto_trains_on_the_cpu_where_torch_sees_no_gpu(calls, gpus_here):
    gpus_here(0)
    result = launch("--mock-data")
    assert result.exit_code == 0, result.output
    [call] = calls()
    assert call["env"] == {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "CUDA_DEVICE_MAX_CONNECTIONS": None}
    assert call["argv"][:3] == ["--standalone", "--nproc-per-node", "2"] and value(call["argv"], "--distributed-backend") == "gloo"
    assert result.stderr.count("no GPU visible to torch here: training on this machine's CPU") == 1
    hint = refused(launch("--mock-data", "--device", "gpu"), ExitCode.ENVIRONMENT, "--device gpu, but torch sees no GPU here")
    assert "--device cpu" in hint
    assert len(calls()) == 1


def test_processes_and_parallel_sizes_are_checked_against_the_gpus(calls, gpus_here):
    gpus_here(4)
    hint = refused(launch("--mock-data", "--gpus-per-node", "8"), ExitCode.USAGE, "--gpus-per-node 8, but torch sees 4 GPU(s) here")
    assert hint.startswith("--gpus-per-node 4")
    refused(launch("--mock-data"), ExitCode.USAGE, "recipe small-radeon has no layout for 4 GPU(s) per node")  # its layouts: 1, 8
    gpus_here(1)
    assert launch("--mock-data").exit_code == 0 and calls()[0]["argv"][:3] == ["--standalone", "--nproc-per-node", "1"]
    gpus_here(8)
    refused(launch("--mock-data", "--", "--tensor-model-parallel-size", "3"), ExitCode.USAGE, "after --: 8 GPUs are not a multiple of TP 3")
    hint = refused(launch("--device", "cpu", "--mock-data", "--", "--pipeline-model-parallel-size", "4"), ExitCode.USAGE,
                   "after --: 2 GPUs are not a multiple of TP 1 x PP 4")
    assert hint.startswith("on 2 CPU processes")
    assert len(calls()) == 1


def test_a_dry_run_checks_nothing_of_this_machine(calls, gpus_here):
    gpus_here(0)
    result = launch("--dry-run", "--device", "gpu", "--data-path", "data/none", "--tokenizer", "org/tok")
    assert result.exit_code == 0 and "--nproc-per-node 8" in result.stdout and calls() == []


def test_a_corpus_too_small_for_the_split_trains_on_all_of_it_said_once(tmp_path, calls):
    """Megatron counts epochs of an empty validation part forever (a hang after "valid indices")."""
    prefix = data(tmp_path, "data/corpus_text_document", documents=4)
    result = launch("--device", "cpu", "--data-path", prefix, "--tokenizer", "NullTokenizer", "--", "--tokenizer-type", "NullTokenizer",
                    "--vocab-size", "512")
    assert result.exit_code == ExitCode.OK, result.output
    [call] = calls()
    assert (value(call["argv"], "--split"), value(call["argv"], "--eval-iters")) == ("100,0,0", "0")
    [note] = [line for line in result.stderr.splitlines() if "document(s) leave" in line]
    assert note.startswith(f"--data-path {prefix}: 4 document(s) leave the validation part of --split 99,1,0 empty: "
                           "training on all of them without evaluation")
    data(tmp_path, "data/big_text_document", documents=100)
    assert launch("--device", "cpu", "--data-path", "data/big_text_document", "--tokenizer", "NullTokenizer", "--",
                  "--tokenizer-type", "NullTokenizer", "--vocab-size", "512").exit_code == ExitCode.OK
    assert value(calls()[1]["argv"], "--split") == "99,1,0"  # enough documents: the recipe's split


def test_a_split_given_that_leaves_a_part_empty_is_refused_and_an_empty_corpus_too(tmp_path, calls):
    prefix = data(tmp_path, "data/corpus_text_document", documents=4)
    tokenizer = ("--tokenizer", "NullTokenizer", "--", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512")
    hint = refused(launch("--device", "cpu", "--data-path", prefix, *tokenizer, "--split", "98,1,1"), ExitCode.USAGE,
                   f"--data-path {prefix}: 4 document(s) leave the validation and test parts of --split 98,1,1 empty")
    assert hint == "give at least 76 documents, or train on all of them: --split 100,0,0 --eval-iters 0\n"
    assert launch("--device", "cpu", "--data-path", prefix, *tokenizer, "--split", "3,1,0").exit_code == ExitCode.OK
    refused(launch("--device", "cpu", "--data-path", data(tmp_path, "data/empty", documents=0), *tokenizer), ExitCode.USAGE,
            "--data-path data/empty: no document in it")
    assert len(calls()) == 1
