"""Megatron-LM's training arguments as rocmpatch reads and writes them, in one place: argument
vectors (parse and render), typed reads with Megatron's defaults, the parallel layout they ask for
(`ParallelLayout`: tp, pp, cp, ep, etp over a world size -> dp, and what Megatron would refuse), and
the attention shape one GPU computes. Used by recipes (catalog, launch, memory), smoke and bench.

Arguments are a dict {flag: value} as recipes hold them: a switch is True (False or None: absent),
a value a number or string, several values a tuple (`--data-path 0.7 a 0.3 b`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from rocmpatch.errors import UsageError


def to_argv(args: dict) -> list[str]:
    """{'--bf16': True, '--lr': 3e-4, '--x': False, '--data-path': ('0.7', 'a')} ->
    ['--bf16', '--lr', '0.0003', '--data-path', '0.7', 'a']."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (tuple, list)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return argv


def parse_argv(argv: list[str] | tuple[str, ...]) -> dict:
    """Megatron flags given on the command line (after `--`) as recipe args: a flag alone is a
    switch (True), one value a string, several values a tuple (`--data-path 0.7 a 0.3 b`)."""
    args: dict = {}
    flag = None
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            flag, value = token.split("=", 1) if "=" in token else (token, None)
            args[flag] = True if value is None else value
        elif flag is None:
            raise UsageError(f"{token!r} after -- is not a Megatron flag", hint="write Megatron's flags as --name value")
        elif args[flag] is True:
            args[flag] = token
        else:
            previous = args[flag]
            args[flag] = (*previous, token) if isinstance(previous, tuple) else (previous, token)
    return args


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of the last `flag` in an argument vector (`--flag value` or `--flag=value`), or None."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def integer(args: dict, flag: str, default: int = 0) -> int:
    """An integer flag; absent (or None / False) is `default`. A switch given without its number is
    refused in one line rather than read as 1."""
    value = args.get(flag)
    if value is None or value is False:
        return default
    if value is True:
        raise UsageError(f"{flag} needs a number", hint=f"write {flag} N")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} {value!r}: not an integer", hint=f"write {flag} N") from None


@dataclass(frozen=True)
class ParallelLayout:
    """How Megatron splits `world` processes: tensor (tp), pipeline (pp), context (cp) and expert
    (ep, with expert tensor parallel etp) parallel sizes; the rest is data parallel."""

    world: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # None: tp, as Megatron defaults --expert-tensor-parallel-size

    @classmethod
    def of(cls, args: dict, world: int) -> ParallelLayout:
        tp = integer(args, "--tensor-model-parallel-size", 1)
        return cls(world, tp, integer(args, "--pipeline-model-parallel-size", 1), integer(args, "--context-parallel-size", 1),
                   integer(args, "--expert-model-parallel-size", 1), integer(args, "--expert-tensor-parallel-size", tp))

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def dp(self) -> int:
        """Data-parallel size (0 when the model-parallel sizes do not divide the world)."""
        model = self.tp * self.pp * self.cp
        return self.world // model if self.world % model == 0 else 0

    def problems(self, args: dict) -> list[str]:
        """What makes Megatron refuse `args` with this layout, one line each."""
        tp, pp, cp, ep = self.tp, self.pp, self.cp, self.ep
        problems = []
        if not self.dp:
            problems.append(f"{self.world} GPUs are not a multiple of TP {tp} x PP {pp} x CP {cp}")
        else:
            mbs, gbs = integer(args, "--micro-batch-size", 1), integer(args, "--global-batch-size", 1)
            if gbs % (mbs * self.dp):
                problems.append(f"global batch {gbs} is not a multiple of micro batch {mbs} x data parallel {self.dp}")
        if integer(args, "--num-layers", 1) % pp:
            problems.append(f"layers not divisible by PP {pp}")
        if integer(args, "--num-attention-heads", 1) % tp or integer(args, "--num-query-groups", tp) % tp:
            problems.append(f"attention heads / query groups not divisible by TP {tp}")
        if ep > 1 and (integer(args, "--num-experts", 0) % ep or self.world % (ep * self.expert_tp * pp)):
            problems.append(f"experts or GPUs not divisible by EP {ep}")
        if cp > 1 and integer(args, "--seq-length", 0) % (2 * cp * tp):
            problems.append(f"sequence length not divisible by 2 x CP {cp} x TP {tp} (each CP rank holds two chunks, split over TP)")
        return problems


@dataclass(frozen=True)
class AttentionShape:
    """What one GPU's attention computes: query heads and key/value head groups (over TP), the
    query/key head size, its sequence (over CP), and the value head size where it differs (MLA)."""

    heads: int
    groups: int
    head_dim: int
    seq: int
    v_head_dim: int | None = None

    @classmethod
    def of(cls, args: dict, layout: ParallelLayout) -> AttentionShape:
        heads = integer(args, "--num-attention-heads")
        seq = integer(args, "--seq-length") // layout.cp
        if args.get("--multi-latent-attention"):  # query/key heads of qk + RoPE dims, value heads apart
            qk = integer(args, "--qk-head-dim", 128) + integer(args, "--qk-pos-emb-head-dim", 64)
            return cls(heads // layout.tp, heads // layout.tp, qk, seq, integer(args, "--v-head-dim", 128))
        groups = integer(args, "--num-query-groups", heads) if args.get("--group-query-attention") else heads
        head_dim = integer(args, "--kv-channels", integer(args, "--hidden-size") // heads)
        return cls(heads // layout.tp, groups // layout.tp, head_dim, seq)


DEVICE_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
FSDP_FLAGS = ("--use-torch-fsdp2", "--use-megatron-fsdp")


def gpu_launch_environment(args: dict, environ: Mapping[str, str]) -> dict[str, str]:
    """What a GPU launch of pretrain_gpt.py sets unless `environ` (the user's) already does:
    CUDA_DEVICE_MAX_CONNECTIONS=1, which upstream's validate_args asserts on CUDA GPUs before Blackwell
    with tensor or context parallelism (HIP ignores it; the series keeps that check to CUDA builds).
    Not with FSDP, which asserts the opposite. examples/pretrain_gpt_rocm.sh sets the same."""
    if DEVICE_CONNECTIONS in environ or any(args.get(flag) for flag in FSDP_FLAGS):
        return {}
    return {DEVICE_CONNECTIONS: "1"}
