"""The Megatron flags smoke's train stage passes to every release's training script: the tiny
model's size, mock data and tokenizer, precision, backend and the parallel sizes derived from the
world size. Imports nothing of smoke's: profile.py checks release profiles against owned_flags()
without importing the stage."""

from __future__ import annotations

from dataclasses import dataclass

from rocmpatch.megatron_args import ParallelLayout, flag_value


@dataclass(frozen=True)
class Profile:
    """The tiny GPT and how it runs: sized so a GPU run shows real throughput and a CPU run stays short."""
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    micro_batch_size: int
    vocab_size: int  # > seq_length: MockGPTDataset writes the sample length as the first token
    iterations: int  # default of --train-iters
    backend: str


GPU = Profile(2, 256, 8, 256, 4, 1024, iterations=20, backend="nccl")
CPU = Profile(2, 64, 4, 64, 4, 128, iterations=10, backend="gloo")


def profile_for(platform: str) -> Profile:
    return CPU if platform == "cpu" else GPU


def tensor_parallel_size(world: int, heads: int) -> int:
    return next(tp for tp in (8, 4, 2, 1) if tp <= world and world % tp == 0 and heads % tp == 0)


def layout_for(profile: Profile, world: int) -> ParallelLayout:
    """The tiny model's layout on `world` workers: the largest TP its heads allow, the rest data parallel."""
    return ParallelLayout(world, tensor_parallel_size(world, profile.num_attention_heads))


def expert_parallel_size(world: int, tp: int, flags: list[str]) -> int:
    """For a run with --num-experts: the largest of 8/4/2 that divides the expert count and the
    workers left by the expert tensor parallel size (TP unless the run sets
    --expert-tensor-parallel-size), so the alltoall dispatch crosses the GPUs; else 1."""
    experts = flag_value(flags, "--num-experts")
    if experts is None:
        return 1
    etp = int(flag_value(flags, "--expert-tensor-parallel-size") or tp)
    return next(ep for ep in (8, 4, 2, 1) if world % (ep * etp) == 0 and int(experts) % ep == 0)


def pretrain_args(profile: Profile, world: int, iters: int, precision: str | None, flags: list[str]) -> list[str]:
    """The flags smoke sets for every release, then the release's `flags` (from its smoke profile),
    then the expert parallel size of a run with experts."""
    layout = layout_for(profile, world)
    tp = layout.tp
    m = profile
    args = [
        "--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
        "--num-attention-heads", str(m.num_attention_heads), "--seq-length", str(m.seq_length),
        "--max-position-embeddings", str(m.seq_length), "--micro-batch-size", str(m.micro_batch_size),
        "--global-batch-size", str(m.micro_batch_size * layout.dp),
        "--tensor-model-parallel-size", str(tp), "--train-iters", str(iters),
        "--lr", "1e-3", "--lr-decay-style", "constant", "--mock-data",
        "--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab_size), "--split", "98,1,1",
        "--log-interval", "1", "--eval-iters", "1", "--eval-interval", str(iters + 1000),
        "--distributed-backend", m.backend, "--seed", "1234",
    ]
    if precision:
        args.append(f"--{precision}")
    ep = expert_parallel_size(world, tp, flags)
    return args + list(flags) + (["--expert-model-parallel-size", str(ep)] if ep > 1 else [])


def owned_flags() -> frozenset[str]:
    """The flags pretrain_args sets itself: a release's smoke profile may not set them again."""
    return frozenset(a for a in pretrain_args(CPU, 2, 2, None, []) if a.startswith("--")) | {
        "--bf16", "--fp16", "--expert-model-parallel-size"}
