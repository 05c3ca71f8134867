#!/usr/bin/env bash
# GPT pretraining on one node with N GPUs (ROCm or CUDA), using a Megatron-LM tree patched by rocmpatch.
# Every setting is a variable with a default, overridable by the environment or by a flag; flags win.
# Run with --help for the list, --dry-run to print the torchrun command without running it.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: pretrain_gpt_rocm.sh [OPTIONS] [-- EXTRA_MEGATRON_ARGS...]

Launch GPT pretraining with torchrun on one node, using the pretrain_gpt.py of a
Megatron-LM tree patched by rocmpatch (rocmpatch apply --target DIR).
Each option also reads the environment variable in brackets; a flag wins over it.

Where and how many:
  --megatron-dir DIR       patched Megatron-LM checkout [MEGATRON_DIR, default ./Megatron-LM]
  --gpus N                 GPUs (processes) on this node [NUM_GPUS, default 1]
  --tp N                   tensor-parallel size [TP, default 1]
  --pp N                   pipeline-parallel size [PP, default 1]
  --torchrun CMD           torchrun executable [TORCHRUN, default torchrun]

Model (defaults: a GPT-2 small sized model, about 125M parameters):
  --num-layers N           [NUM_LAYERS, default 12]
  --hidden-size N          [HIDDEN_SIZE, default 768]
  --num-heads N            [NUM_HEADS, default 12]
  --seq-length N           [SEQ_LENGTH, default 1024]
  --mcore                  use the Megatron-Core GPT model (--use-mcore-models) [USE_MCORE=1]
  --flash-attn             pass --use-flash-attn (torch SDPA in the patched tree) [FLASH_ATTN=1]

Training:
  --micro-batch-size N     [MICRO_BATCH_SIZE, default 4]
  --global-batch-size N    [GLOBAL_BATCH_SIZE, default micro batch x data-parallel size x 8]
  --train-iters N          [TRAIN_ITERS, default 100]
  --lr LR                  [LR, default 3e-4; the minimum LR is a tenth of it]
  --warmup-iters N         learning-rate warmup iterations, fewer than --train-iters
                           [LR_WARMUP_ITERS, default 10, or --train-iters - 1 when that is less]
  --precision P            bf16, fp16 or fp32 [PRECISION, default bf16]
  --recompute MODE         none, selective or full activation recompute [RECOMPUTE, default none]
  --distributed-optimizer  shard optimizer state across data-parallel ranks [DIST_OPT=1]
  --sequence-parallel      sequence parallelism (needs --tp > 1) [SEQUENCE_PARALLEL=1]
  --checkpoint-dir DIR     save to and resume from DIR [CHECKPOINT_DIR, default: no checkpoints];
                           a resumed run follows this run's schedule flags (--override-opt_param-scheduler),
                           so it may go on with a larger --train-iters
  --log-interval N         [LOG_INTERVAL, default 10]
  --eval-interval N        validation every N iterations, and once at the end [EVAL_INTERVAL,
                           default 1000]; not tied to --train-iters, so a resumed run with more
                           iterations still has validation data for its final evaluation

Data (mock data unless --data-path is given):
  --data-path PREFIX       preprocessed data: PREFIX.bin and PREFIX.idx from
                           tools/preprocess_data.py [DATA_PATH]
  --tokenizer-type T       [TOKENIZER_TYPE, default NullTokenizer with mock data,
                           GPT2BPETokenizer with --data-path]
  --vocab-file FILE        GPT-2 vocab.json (GPT2BPETokenizer) [VOCAB_FILE]
  --merge-file FILE        GPT-2 merges.txt (GPT2BPETokenizer) [MERGE_FILE]
  --tokenizer-model FILE   SentencePiece model (GPTSentencePieceTokenizer, ...), or for
                           HuggingFaceTokenizer a Hub name or folder [TOKENIZER_MODEL]
  --vocab-size N           NullTokenizer vocabulary size [VOCAB_SIZE, default 50257]

Other:
  --master-port PORT       accepted from older versions of this script and not used: torchrun
                           --standalone picks a free port, so two runs on one node do not collide
  --dry-run                print the command (CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ...) on one line, exit 0;
                           files and directories are not checked
  -h, --help               print this help and exit

Arguments after -- go to pretrain_gpt.py unchanged (for example -- --save-interval 500).
Exit status: 0 on success (or the training's own status), 2 for invalid arguments.
EOF
}

die() {
    echo "pretrain_gpt_rocm.sh: error: $*" >&2
    echo "Run with --help for the options." >&2
    exit 2
}

# Defaults, overridable by the environment.
MEGATRON_DIR="${MEGATRON_DIR:-./Megatron-LM}"
NUM_GPUS="${NUM_GPUS:-1}"
TP="${TP:-1}"
PP="${PP:-1}"
TORCHRUN="${TORCHRUN:-torchrun}"
NUM_LAYERS="${NUM_LAYERS:-12}"
HIDDEN_SIZE="${HIDDEN_SIZE:-768}"
NUM_HEADS="${NUM_HEADS:-12}"
SEQ_LENGTH="${SEQ_LENGTH:-1024}"
USE_MCORE="${USE_MCORE:-0}"
FLASH_ATTN="${FLASH_ATTN:-0}"
MICRO_BATCH_SIZE="${MICRO_BATCH_SIZE:-4}"
GLOBAL_BATCH_SIZE="${GLOBAL_BATCH_SIZE:-}"
TRAIN_ITERS="${TRAIN_ITERS:-100}"
LR="${LR:-3e-4}"
LR_WARMUP_ITERS="${LR_WARMUP_ITERS:-}"
PRECISION="${PRECISION:-bf16}"
RECOMPUTE="${RECOMPUTE:-none}"
DIST_OPT="${DIST_OPT:-0}"
SEQUENCE_PARALLEL="${SEQUENCE_PARALLEL:-0}"
CHECKPOINT_DIR="${CHECKPOINT_DIR:-}"
LOG_INTERVAL="${LOG_INTERVAL:-10}"
EVAL_INTERVAL="${EVAL_INTERVAL:-1000}"
DATA_PATH="${DATA_PATH:-}"
TOKENIZER_TYPE="${TOKENIZER_TYPE:-}"
VOCAB_FILE="${VOCAB_FILE:-}"
MERGE_FILE="${MERGE_FILE:-}"
TOKENIZER_MODEL="${TOKENIZER_MODEL:-}"
VOCAB_SIZE="${VOCAB_SIZE:-50257}"
DRY_RUN=0
EXTRA_ARGS=()

# An option that takes a value: refuse a missing one rather than swallowing the next flag.
need_value() {
    if [[ $# -lt 2 || "$2" == --* ]]; then
        die "$1 needs a value"
    fi
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --mcore) USE_MCORE=1; shift ;;
        --flash-attn) FLASH_ATTN=1; shift ;;
        --distributed-optimizer) DIST_OPT=1; shift ;;
        --sequence-parallel) SEQUENCE_PARALLEL=1; shift ;;
        --) shift; EXTRA_ARGS=("$@"); break ;;
        --megatron-dir|--gpus|--tp|--pp|--master-port|--torchrun|--num-layers|--hidden-size|\
        --num-heads|--seq-length|--micro-batch-size|--global-batch-size|--train-iters|--lr|--warmup-iters|\
        --precision|--recompute|--checkpoint-dir|--log-interval|--eval-interval|--data-path|--tokenizer-type|\
        --vocab-file|--merge-file|--tokenizer-model|--vocab-size)
            need_value "$@"
            case "$1" in
                --megatron-dir) MEGATRON_DIR="$2" ;;
                --gpus) NUM_GPUS="$2" ;;
                --tp) TP="$2" ;;
                --pp) PP="$2" ;;
                --master-port)  # torchrun --standalone takes a free port itself: nothing to set
                    echo "pretrain_gpt_rocm.sh: note: --master-port $2 is not used: torchrun --standalone picks a free port (two runs on one node do not collide)" >&2 ;;
                --torchrun) TORCHRUN="$2" ;;
                --num-layers) NUM_LAYERS="$2" ;;
                --hidden-size) HIDDEN_SIZE="$2" ;;
                --num-heads) NUM_HEADS="$2" ;;
                --seq-length) SEQ_LENGTH="$2" ;;
                --micro-batch-size) MICRO_BATCH_SIZE="$2" ;;
                --global-batch-size) GLOBAL_BATCH_SIZE="$2" ;;
                --train-iters) TRAIN_ITERS="$2" ;;
                --lr) LR="$2" ;;
                --warmup-iters) LR_WARMUP_ITERS="$2" ;;
                --precision) PRECISION="$2" ;;
                --recompute) RECOMPUTE="$2" ;;
                --checkpoint-dir) CHECKPOINT_DIR="$2" ;;
                --log-interval) LOG_INTERVAL="$2" ;;
                --eval-interval) EVAL_INTERVAL="$2" ;;
                --data-path) DATA_PATH="$2" ;;
                --tokenizer-type) TOKENIZER_TYPE="$2" ;;
                --vocab-file) VOCAB_FILE="$2" ;;
                --merge-file) MERGE_FILE="$2" ;;
                --tokenizer-model) TOKENIZER_MODEL="$2" ;;
                --vocab-size) VOCAB_SIZE="$2" ;;
            esac
            shift 2 ;;
        --*=*) die "write '${1%%=*} ${1#*=}' (a space, not '=')" ;;
        *) die "unknown option '$1' (arguments for pretrain_gpt.py go after --)" ;;
    esac
done

# --- validation: every message names the option and says what would be valid ---
positive_int() {  # name value
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"
}
positive_int --gpus "$NUM_GPUS"
positive_int --tp "$TP"
positive_int --pp "$PP"
positive_int --num-layers "$NUM_LAYERS"
positive_int --hidden-size "$HIDDEN_SIZE"
positive_int --num-heads "$NUM_HEADS"
positive_int --seq-length "$SEQ_LENGTH"
positive_int --micro-batch-size "$MICRO_BATCH_SIZE"
positive_int --train-iters "$TRAIN_ITERS"
LR_WARMUP_ITERS="${LR_WARMUP_ITERS:-$((TRAIN_ITERS > 10 ? 10 : TRAIN_ITERS - 1))}"
[[ "$LR_WARMUP_ITERS" =~ ^[0-9]+$ ]] || die "--warmup-iters must be a whole number, got '$LR_WARMUP_ITERS'"
((LR_WARMUP_ITERS < TRAIN_ITERS)) || die "--warmup-iters $LR_WARMUP_ITERS must be fewer than --train-iters $TRAIN_ITERS"
positive_int --log-interval "$LOG_INTERVAL"
positive_int --eval-interval "$EVAL_INTERVAL"
positive_int --vocab-size "$VOCAB_SIZE"
[[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "--lr must be a number such as 3e-4, got '$LR'"
for flag in USE_MCORE FLASH_ATTN DIST_OPT SEQUENCE_PARALLEL; do
    [[ "${!flag}" == 0 || "${!flag}" == 1 ]] || die "$flag must be 0 or 1, got '${!flag}'"
done

model_parallel=$((TP * PP))
if ((NUM_GPUS % model_parallel != 0)); then
    die "--gpus $NUM_GPUS is not divisible by --tp $TP x --pp $PP = $model_parallel; use a GPU count that is a multiple of $model_parallel"
fi
DP=$((NUM_GPUS / model_parallel))
if ((HIDDEN_SIZE % NUM_HEADS != 0)); then
    die "--hidden-size $HIDDEN_SIZE is not divisible by --num-heads $NUM_HEADS"
fi
if ((NUM_HEADS % TP != 0)); then
    die "--num-heads $NUM_HEADS is not divisible by --tp $TP: each tensor-parallel rank needs whole attention heads"
fi
if ((NUM_LAYERS % PP != 0)); then
    die "--num-layers $NUM_LAYERS is not divisible by --pp $PP: each pipeline stage needs the same number of layers"
fi
GLOBAL_BATCH_SIZE="${GLOBAL_BATCH_SIZE:-$((MICRO_BATCH_SIZE * DP * 8))}"
positive_int --global-batch-size "$GLOBAL_BATCH_SIZE"
if ((GLOBAL_BATCH_SIZE % (MICRO_BATCH_SIZE * DP) != 0)); then
    die "--global-batch-size $GLOBAL_BATCH_SIZE is not divisible by --micro-batch-size $MICRO_BATCH_SIZE x data-parallel size $DP = $((MICRO_BATCH_SIZE * DP))"
fi
if ((SEQUENCE_PARALLEL == 1 && TP == 1)); then
    die "--sequence-parallel needs --tp greater than 1"
fi

case "$PRECISION" in
    bf16|fp16|fp32) ;;
    *) die "--precision must be bf16, fp16 or fp32, got '$PRECISION'" ;;
esac
case "$RECOMPUTE" in
    none|selective|full) ;;
    *) die "--recompute must be none, selective or full, got '$RECOMPUTE'" ;;
esac

if [[ -z "$TOKENIZER_TYPE" ]]; then
    if [[ -n "$DATA_PATH" ]]; then TOKENIZER_TYPE=GPT2BPETokenizer; else TOKENIZER_TYPE=NullTokenizer; fi
fi
case "$TOKENIZER_TYPE" in
    GPT2BPETokenizer)
        [[ -n "$VOCAB_FILE" && -n "$MERGE_FILE" ]] ||
            die "GPT2BPETokenizer needs --vocab-file and --merge-file (GPT-2 vocab.json and merges.txt; see docs/training.md)" ;;
    GPTSentencePieceTokenizer|SentencePieceTokenizer|Llama2Tokenizer)
        [[ -n "$TOKENIZER_MODEL" ]] || die "$TOKENIZER_TYPE needs --tokenizer-model FILE" ;;
    HuggingFaceTokenizer)
        [[ -n "$TOKENIZER_MODEL" ]] ||
            die "HuggingFaceTokenizer needs --tokenizer-model NAME_OR_DIR (a Hugging Face name such as meta-llama/Meta-Llama-3-8B, or a folder with its files; core_v0.19.0)" ;;
    NullTokenizer)
        [[ -z "$DATA_PATH" ]] ||
            echo "pretrain_gpt_rocm.sh: note: NullTokenizer with --data-path: the data must have been preprocessed with NullTokenizer too" >&2 ;;
    BertWordPieceLowerCase|BertWordPieceCase)
        die "$TOKENIZER_TYPE is a BERT tokenizer; GPT pretraining needs GPT2BPETokenizer, a SentencePiece tokenizer or NullTokenizer" ;;
    *) die "--tokenizer-type '$TOKENIZER_TYPE' is not one this script knows (GPT2BPETokenizer, GPTSentencePieceTokenizer, SentencePieceTokenizer, Llama2Tokenizer, NullTokenizer; HuggingFaceTokenizer at core_v0.19.0)" ;;
esac

# Files and directories: checked only when really launching, so that a dry run can prepare a
# command for another machine.
if ((DRY_RUN == 0)); then
    [[ -f "$MEGATRON_DIR/pretrain_gpt.py" ]] ||
        die "no pretrain_gpt.py in --megatron-dir '$MEGATRON_DIR'; create the patched tree with: rocmpatch apply --target $MEGATRON_DIR"
    if [[ -n "$DATA_PATH" ]]; then
        for suffix in bin idx; do
            [[ -f "$DATA_PATH.$suffix" ]] ||
                die "--data-path '$DATA_PATH': no $DATA_PATH.$suffix (give the prefix that tools/preprocess_data.py wrote, without .bin/.idx)"
        done
    fi
    model_file="$TOKENIZER_MODEL"
    [[ "$TOKENIZER_TYPE" != HuggingFaceTokenizer ]] || model_file=""  # a Hub name or a folder
    for pair in "--vocab-file:$VOCAB_FILE" "--merge-file:$MERGE_FILE" "--tokenizer-model:$model_file"; do
        value="${pair#*:}"
        [[ -z "$value" || -f "$value" ]] || die "${pair%%:*} '$value' does not exist"
    done
    command -v "$TORCHRUN" >/dev/null ||
        die "'$TORCHRUN' not found: install PyTorch (see docs/install.md) or give --torchrun"
fi

# --- the command ---
# The launcher words are rocmpatch's one-node torchrun line (rocmpatch/launchers.py, torchrun():
# a test keeps them equal): --standalone runs the rendezvous on this host at a free port.
cmd=("$TORCHRUN" --standalone --nproc-per-node "$NUM_GPUS"
    "$MEGATRON_DIR/pretrain_gpt.py"
    --tensor-model-parallel-size "$TP"
    --pipeline-model-parallel-size "$PP"
    --num-layers "$NUM_LAYERS"
    --hidden-size "$HIDDEN_SIZE"
    --num-attention-heads "$NUM_HEADS"
    --seq-length "$SEQ_LENGTH"
    --max-position-embeddings "$SEQ_LENGTH"
    --micro-batch-size "$MICRO_BATCH_SIZE"
    --global-batch-size "$GLOBAL_BATCH_SIZE"
    --train-iters "$TRAIN_ITERS"
    --lr "$LR"
    --min-lr "$(awk -v lr="$LR" 'BEGIN { printf "%g", lr / 10 }')"
    --lr-decay-style cosine
    --lr-warmup-iters "$LR_WARMUP_ITERS"
    --weight-decay 0.1
    --clip-grad 1.0
    --log-interval "$LOG_INTERVAL"
    --log-throughput
    --eval-interval "$EVAL_INTERVAL"
    --eval-iters 10
    --tokenizer-type "$TOKENIZER_TYPE")

case "$PRECISION" in
    bf16) cmd+=(--bf16) ;;
    fp16) cmd+=(--fp16) ;;
esac
case "$RECOMPUTE" in
    selective) cmd+=(--recompute-activations) ;;
    full) cmd+=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1) ;;
esac
if ((USE_MCORE == 1)); then cmd+=(--use-mcore-models); fi
if ((FLASH_ATTN == 1)); then cmd+=(--use-flash-attn); fi
if ((DIST_OPT == 1)); then cmd+=(--use-distributed-optimizer); fi
if ((SEQUENCE_PARALLEL == 1)); then cmd+=(--sequence-parallel); fi

if [[ -n "$DATA_PATH" ]]; then
    # No test split: on a small corpus it gets no document, and Megatron (core_v0.19.0) then loops
    # forever building its index, or the final evaluation stops with StopIteration. -- --split A,B,C
    # after the options asks for one on a large corpus.
    cmd+=(--data-path "$DATA_PATH" --split "99,1,0")
else
    cmd+=(--mock-data)
fi
case "$TOKENIZER_TYPE" in
    GPT2BPETokenizer) cmd+=(--vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE") ;;
    NullTokenizer) cmd+=(--vocab-size "$VOCAB_SIZE") ;;
    *) cmd+=(--tokenizer-model "$TOKENIZER_MODEL") ;;
esac
if [[ -n "$CHECKPOINT_DIR" ]]; then
    # A fixed number of warmup iterations and the schedule taken from this run's flags: resuming with a
    # larger --train-iters goes on (Megatron otherwise asserts that the checkpoint's schedule is this one).
    cmd+=(--save "$CHECKPOINT_DIR" --load "$CHECKPOINT_DIR" --save-interval "$TRAIN_ITERS" --override-opt_param-scheduler)
fi
cmd+=(${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"})  # this form is safe under set -u on old bash

# Upstream refuses to start on CUDA builds unless CUDA_DEVICE_MAX_CONNECTIONS=1 (the patched tree keeps
# that check on CUDA only); HIP ignores the variable, so setting it is harmless on ROCm.
CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-1}"

if ((DRY_RUN == 1)); then
    printf 'CUDA_DEVICE_MAX_CONNECTIONS=%q' "$CUDA_DEVICE_MAX_CONNECTIONS"
    printf ' %q' "${cmd[@]}"
    echo
    exit 0
fi

export CUDA_DEVICE_MAX_CONNECTIONS
echo "pretrain_gpt_rocm.sh: $NUM_GPUS GPU(s): tensor-parallel $TP x pipeline-parallel $PP x data-parallel $DP" >&2
exec "${cmd[@]}"
