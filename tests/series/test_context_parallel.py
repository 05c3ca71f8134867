"""context-parallel: context parallelism without Transformer Engine (patches cp-attention, cp-rope-cpu).

CI: the patched megatron/ of the release's wheel, two gloo ranks on the CPU
(harness.run_ranks, testkit/checks/context_parallel.py). The attention over the two ranks' zigzag chunks equals fp64
attention over the whole sequence, one Llama-shaped layer with context parallel 2 has the
gradients of the same layer over the whole sequence, unsupported settings are refused in one line
naming the flag, and the GPU kernels' calls are checked on meta tensors.

Full tree (ROCMPATCH_TEST_UPSTREAM): upstream's own pretrain_gpt.py with --context-parallel-size 2:
the tiny Llama (GQA, RoPE, RMSNorm, SwiGLU, seq 64, global batch 8 of micro-batches of 2, the
dataloader's causal mask) without dropout, 4 iterations over gloo. In fp32 a run with context
parallel 2 logs the losses of the same run with context parallel 1 (one process, the same global
batch) to 1e-4 relative at every iteration, for both --cp-comm-type; bf16 with context parallel 2
trains; tensor parallel 2 with sequence parallelism and context parallel 2 (4 ranks) logs the losses
of tensor parallel 2 alone; an unsupported --cp-comm-type stops with one line.
"""

from __future__ import annotations

import pytest

from testkit import harness
from testkit.checks.context_parallel import HEAD_DIM, SEQ
from testkit.flags import FP32_LLAMA

pytest.importorskip("torch")
pytestmark = harness.releases_with("context-parallel")

FP32 = 1e-5  # max |difference| in fp32 for values and gradients of order 1
GROUPS = "attention,layer,refusals,gpu_ops"


@pytest.fixture(scope="session")
def ranks(patched_wheel, tmp_path_factory) -> list[dict]:
    workdirs = [tmp_path_factory.mktemp(f"cp-rank{rank}") for rank in range(2)]
    return harness.run_ranks("checks.context_parallel", GROUPS, patched_wheel, workdirs, timeout=400)


def test_attention_over_two_ranks_equals_whole_sequence(ranks):
    """Both --cp-comm-type (and upstream's spelling allgather), causal and unmasked, the CPU's
    flash kernel (fused) and plain torch (math), and value heads narrower than the query/key
    heads (multi-latent attention: padded for the flash kernel): output and every input gradient
    in fp32."""
    for result in ranks:
        names = [case["case"] for case in result["attention"]["cases"]]
        assert len(names) == 14 and names[-2:] == ["p2p causal fused mla", "all_gather causal fused mla"], names
        for case in result["attention"]["cases"]:
            assert case["out"] < FP32 and max(case["grads"]) < FP32, (result["attention"]["rank"], case)
            fused = "fused" in case["case"].split()
            assert case["kinds"] == (["cpu_flash"] if fused else ["math"]), case


def test_ring_blocks_balance_the_causal_work(ranks):
    """p2p, causal, sequence 16 over 2 ranks (chunks of 4): step 0 is the local 8x8 causal block;
    at step 1 rank 0 (chunks 0 and 3) sees rank 1's chunks 1 and 2, which only its chunk 3 attends
    to (4 rows x 8 keys), and rank 1 sees chunk 0 (8 rows x 4 keys): the same work on both.
    all_gather: the two local 4x4 diagonal blocks, then each chunk over the keys before it."""
    blocks = [{c["case"]: c["blocks"] for c in r["attention"]["cases"]} for r in ranks]
    assert blocks[0]["p2p causal fused"] == [[8, 8, True], [4, 8, False]]
    assert blocks[1]["p2p causal fused"] == [[8, 8, True], [8, 4, False]]
    assert blocks[0]["p2p no mask fused"] == [[8, 8, False], [8, 8, False]]
    assert blocks[0]["all_gather causal fused"] == [[4, 4, True], [4, 4, True], [4, 12, False]]
    assert blocks[1]["all_gather causal fused"] == [[4, 4, True], [4, 4, True], [4, 4, False], [4, 8, False]]


@pytest.mark.parametrize("rope", ["rope", "fused rope"])
def test_one_layer_gradients_equal_the_whole_sequence(ranks, rope):
    """A TransformerLayer (RMSNorm, SwiGLU, 4 query heads over 2 key/value groups, RoPE sliced by
    get_pos_emb_on_this_cp_rank) with context parallel 2 against the same weights over the whole
    sequence: output, input gradient and each parameter's gradient summed over the ranks. With
    --rope-fusion (on by default: rope-torch-fused) the torch form rotates q and k with this
    rank's half of the positions."""
    for result in ranks:
        layer = result["layer"][rope]
        assert layer["cp_used"] == "p2p"
        half = [SEQ // 2, 1, 1, HEAD_DIM]
        assert layer["fused_rope_freqs"] == ([half, half] if rope == "fused rope" else []), layer
        assert layer["out"] < FP32 * max(1.0, layer["out_scale"]), layer
        assert layer["input_grad"] < FP32, layer
        assert len(layer["param_grads"]) >= 6, layer  # qkv, proj, fc1, fc2 and the two norms
        worst = max(layer["param_grads"].values())
        assert worst < FP32 * max(1.0, layer["param_grad_scale"]), layer


def test_unsupported_settings_are_refused_in_one_line_naming_the_flag(ranks):
    refused = ranks[0]["refusals"]["refused"]
    expected = {
        "a2a": "--cp-comm-type a2a: ",
        "a2a+p2p": "--cp-comm-type a2a+p2p: ",
        "window": "--window-size: ",
        "softmax offset": "--softmax-type off-by-one: ",
        "attention dropout": "--attention-dropout 0.1: ",
        "padding mask": "--context-parallel-size 2: ",
        "cross attention": "--context-parallel-size 2: ",
    }
    for name, start in expected.items():
        message = refused[name]
        assert message is not None and message.startswith(start) and "\n" not in message, (name, message)
    assert "pass --attention-dropout 0" in refused["attention dropout"]


def test_comm_types_and_kernels_accepted(ranks):
    accepted = ranks[0]["refusals"]["accepted"]
    assert accepted["p2p"] == accepted["None"] == ["p2p", "fused"]
    assert accepted["all_gather"] == accepted["allgather"] == ["all_gather", "fused"]
    assert accepted["unfused"] == "math" and accepted["deterministic"] == "math"


def test_dataloader_causal_mask_accepted_document_mask_refused(ranks):
    for result in ranks:
        refusals = result["refusals"]
        assert refusals["causal_mask_err"] == 0.0, refusals
        assert refusals["document_error"].startswith("--context-parallel-size 2: "), refusals
        assert "--reset-attention-mask" in refusals["document_error"]


def test_gpu_kernel_calls_on_meta_tensors(ranks):
    """What a GPU runs, argument for argument: the flash kernel with grouped heads as they are and
    repeated, the memory-efficient kernel (its log-sum-exp padded to 32 rows, cut to 24); the
    gradients come back shaped like the block's query (4 heads) and key/value (2 groups)."""
    ops = ranks[0]["gpu_ops"]
    for name in ("flash gqa", "flash repeated", "efficient repeated"):
        assert ops[name] == {"out": [2, 4, 24, 8], "lse": [2, 4, 24],
                             "grads": [[2, 4, 24, 8], [2, 2, 48, 8], [2, 2, 48, 8]]}, (name, ops[name])
    for name in ("flash gqa mla", "efficient repeated mla"):  # value heads of 4, padded to 8 and cut
        assert ops[name] == {"out": [2, 4, 24, 4], "lse": [2, 4, 24],
                             "grads": [[2, 4, 24, 8], [2, 2, 48, 8], [2, 2, 48, 4]]}, (name, ops[name])


# ---------------------------------------------------------------- full tree: pretrain_gpt.py


ITERS = 4
RELATIVE = 1e-4
# The tiny Llama in fp32 without dropout: a run's losses depend only on the data and the weights.
NO_DROPOUT = [*FP32_LLAMA, "--attention-dropout", "0", "--hidden-dropout", "0"]


def run(tree, ranks: int, *extra: str, flags: list[str] = NO_DROPOUT) -> harness.Training:
    return harness.pretrain(tree, [*flags, "--train-iters", str(ITERS), *extra], processes=ranks, timeout=900)


def losses(tree, ranks: int, *extra: str, flags: list[str] = NO_DROPOUT) -> dict[int, float]:
    done = harness.trains(tree, [*flags, "--train-iters", str(ITERS), *extra], processes=ranks, timeout=900)
    assert sorted(done.losses) == list(range(1, ITERS + 1)), done.tail()
    return done.losses


def assert_same(got: dict[int, float], want: dict[int, float], relative: float = RELATIVE) -> None:
    for iteration, loss in want.items():
        assert abs(got[iteration] - loss) <= relative * abs(loss), (iteration, got, want)


@pytest.fixture(scope="session")
def cp1(training_tree) -> dict[int, float]:
    return losses(training_tree, 1)


@pytest.mark.upstream
@pytest.mark.parametrize("extra", [["--cp-comm-type", "p2p"], ["--cp-comm-type", "all_gather"], ["--no-rope-fusion"]],
                         ids=["p2p", "all_gather", "unfused-rope"])
def test_cp2_fp32_losses_equal_cp1(training_tree, cp1, extra):
    """The RoPE fusion is on by default (rope-torch-fused): each rank rotates its half of the
    positions with the torch form, or with --no-rope-fusion with the unfused one; both give the
    losses of context parallel 1 (fused)."""
    done = run(training_tree, 2, "--context-parallel-size", "2", *extra)
    assert done.returncode == 0, done.tail(6000)
    assert "turning apply_rope_fusion off" not in done.output, done.tail(3000)  # fusion on unless asked
    assert_same(done.losses, cp1)


@pytest.mark.upstream
def test_cp2_bf16_trains(training_tree, cp1):
    """bf16 weights and activations (fp32 gradients and Adam), the ring: the fp32 run's losses
    to the precision of bf16."""
    bf16 = losses(training_tree, 2, "--context-parallel-size", "2", flags=[*NO_DROPOUT, "--bf16"])
    assert_same(bf16, cp1, relative=1e-2)


@pytest.mark.upstream
def test_tp2_sequence_parallel_with_cp2(training_tree):
    tp2 = losses(training_tree, 2, "--tensor-model-parallel-size", "2", "--sequence-parallel")
    tp2_cp2 = losses(training_tree, 4, "--tensor-model-parallel-size", "2", "--sequence-parallel",
                     "--context-parallel-size", "2")
    assert_same(tp2_cp2, tp2)


@pytest.mark.upstream
def test_unsupported_cp_comm_type_is_one_line(training_tree):
    done = run(training_tree, 2, "--context-parallel-size", "2", "--cp-comm-type", "a2a")
    assert done.returncode != 0 and not done.losses
    assert ("ValueError: --cp-comm-type a2a: context parallelism without Transformer Engine runs p2p or "
            "all_gather; pass --cp-comm-type p2p or all_gather.") in done.output, done.tail(3000)
