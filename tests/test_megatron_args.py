"""rocmpatch.megatron_args: argument vectors both ways, typed reads, the parallel layout and what
Megatron would refuse, the attention shape one GPU computes, the environment a GPU launch sets."""

from __future__ import annotations

import pytest

from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.megatron_args import (AttentionShape, ParallelLayout, flag_value, gpu_launch_environment, integer, parse_argv,
                                     to_argv)


def test_argv_round_trip():
    args = {"--bf16": True, "--lr": 3e-4, "--x": False, "--data-path": ("0.7", "a", "0.3", "b"), "--n": 2}
    argv = to_argv(args)
    assert argv == ["--bf16", "--lr", "0.0003", "--data-path", "0.7", "a", "0.3", "b", "--n", "2"]
    assert parse_argv(argv) == {"--bf16": True, "--lr": "0.0003", "--data-path": ("0.7", "a", "0.3", "b"), "--n": "2"}
    assert parse_argv(["--seq-length=4096"]) == {"--seq-length": "4096"}
    assert flag_value(["--tp", "2", "--tp=4"], "--tp") == "4" and flag_value([], "--tp") is None


def test_integer_reads_megatron_defaults_and_refuses_a_bare_switch():
    assert integer({"--n": "8"}, "--n") == 8 and integer({}, "--n", 3) == 3 and integer({"--n": None}, "--n", 3) == 3
    assert integer({"--n": False}, "--n", 3) == 3
    with pytest.raises(UsageError) as refused:
        integer({"--tensor-model-parallel-size": True}, "--tensor-model-parallel-size")
    assert "--tensor-model-parallel-size needs a number" in str(refused.value) and refused.value.exit_code == ExitCode.USAGE


def test_parallel_layout_derives_data_parallel_and_names_each_problem():
    args = {"--tensor-model-parallel-size": 2, "--pipeline-model-parallel-size": 2, "--expert-model-parallel-size": 4,
            "--num-experts": 8, "--num-layers": 4, "--num-attention-heads": 8, "--micro-batch-size": 1, "--global-batch-size": 8}
    layout = ParallelLayout.of(args, 16)
    assert (layout.tp, layout.pp, layout.cp, layout.ep, layout.expert_tp, layout.dp) == (2, 2, 1, 4, 2, 4)
    assert layout.problems(args) == []
    assert ParallelLayout.of(args, 10).problems(args) == ["10 GPUs are not a multiple of TP 2 x PP 2 x CP 1",
                                                          "experts or GPUs not divisible by EP 4"]
    odd = {**args, "--num-layers": 3, "--global-batch-size": 5, "--context-parallel-size": 2, "--seq-length": 100}
    assert ParallelLayout.of(odd, 16).problems(odd) == [
        "global batch 5 is not a multiple of micro batch 1 x data parallel 2", "layers not divisible by PP 2",
        "sequence length not divisible by 2 x CP 2 x TP 2 (each CP rank holds two chunks, split over TP)"]


def test_attention_shape_per_gpu():
    llama = {"--num-attention-heads": 64, "--group-query-attention": True, "--num-query-groups": 8, "--hidden-size": 8192,
             "--seq-length": 32768, "--tensor-model-parallel-size": 8, "--context-parallel-size": 4}
    assert AttentionShape.of(llama, ParallelLayout.of(llama, 32)) == AttentionShape(8, 1, 128, 8192)
    mla = {"--num-attention-heads": 16, "--multi-latent-attention": True, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64,
           "--v-head-dim": 128, "--hidden-size": 2048, "--seq-length": 4096}
    assert AttentionShape.of(mla, ParallelLayout.of(mla, 1)) == AttentionShape(16, 16, 192, 4096, 128)


def test_a_gpu_launch_sets_one_device_connection_unless_the_user_or_fsdp_says_otherwise():
    assert gpu_launch_environment({"--bf16": True}, {}) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert gpu_launch_environment({}, {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}) == {}  # the user's value stands
    assert gpu_launch_environment({"--use-torch-fsdp2": True}, {}) == {}  # FSDP asserts it is not 1
    assert gpu_launch_environment({"--use-megatron-fsdp": True}, {}) == {}
