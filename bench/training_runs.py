"""What the training benchmarks share: the Llama shapes and flags they train, and one run of upstream's
pretrain_gpt.py under bench/pretrain_probe.py. Needs only the standard library here (torch and the
tree's requirements in the child); the estimate comes from rocmpatch/recipes/memory.py, which imports
nothing beyond the standard library either.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "pretrain_probe.py"
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch

# The llama3-8b recipe's flags as `rocmpatch recipe launch` runs them (rocmpatch/recipes/llama3-8b.yaml:
# tests/bench/test_train_throughput.py keeps the two equal), without the data, schedule and layout.
FAST_FLAGS = (
    "--position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --norm-epsilon 1e-5 --swiglu "
    "--disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 "
    "--init-method-std 0.02 --transformer-impl local --cross-entropy-loss-fusion --cross-entropy-fusion-impl native "
    "--no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-persist-layer-norm "
    "--no-create-attention-mask-in-dataloader --bf16 --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather"
).split()
# The recipes' flags before the fast path (every fusion off, the dataloader's mask, no param-gather overlap).
OLD_FLAGS = (
    "--position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --norm-epsilon 1e-5 --swiglu "
    "--disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 "
    "--init-method-std 0.02 --transformer-impl local --no-rope-fusion --no-gradient-accumulation-fusion "
    "--no-masked-softmax-fusion --no-bias-swiglu-fusion --no-persist-layer-norm --bf16 --use-distributed-optimizer "
    "--overlap-grad-reduce"
).split()


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    groups: int
    seq: int
    vocab: int
    micro_batch: int
    global_batch: int

    def args(self) -> list[str]:
        # groups == heads: no grouped attention (multi-latent attention refuses it)
        gqa = ["--group-query-attention", "--num-query-groups", str(self.groups)] if self.groups != self.heads else []
        return ["--num-layers", str(self.layers), "--hidden-size", str(self.hidden), "--ffn-hidden-size", str(self.ffn),
                "--num-attention-heads", str(self.heads), *gqa,
                "--seq-length", str(self.seq), "--max-position-embeddings", str(self.seq),
                "--micro-batch-size", str(self.micro_batch), "--global-batch-size", str(self.global_batch),
                "--vocab-size", str(self.vocab), "--make-vocab-size-divisible-by", "128"]

    def recipe_args(self, flags: list[str]) -> dict:
        """The run's flags as a recipe's args mapping (for rocmpatch/recipes/memory.py)."""
        from rocmpatch.megatron_args import parse_argv

        return parse_argv([*self.args(), *flags])


# llama3-8b's shape (hidden 4096, SwiGLU 14336, 32 heads / 8 groups, vocab 128256, seq 8192) with fewer
# layers, for one GPU; and a tiny shape of the same proportions for the CPU.
LLAMA3_8B = Shape("llama3-8b shape", 4, 4096, 14336, 32, 8, 8192, 128256, 1, 8)
TINY = Shape("tiny llama", 2, 64, 176, 4, 2, 128, 512, 2, 4)
# The MoE paths (train_throughput.py --moe): DeepSeek-V2-Lite's block (rocmpatch/recipes/deepseek-v2-lite.yaml:
# MLA with a 512 kv latent, 64 routed experts of 1408, top-6, 2 shared) with fewer layers, the first dense;
# on the CPU a tiny block of the same kind (16 experts of 64).
DEEPSEEK_V2_LITE = Shape("deepseek-v2-lite shape", 4, 2048, 10944, 16, 16, 4096, 102400, 1, 8)
TINY_MOE = Shape("tiny deepseek", 2, 64, 176, 4, 4, 128, 512, 2, 4)


def moe_flags(shape: Shape) -> list[str]:
    """The recipe's MLA and MoE flags for `shape` (its layers: the first dense, the rest MoE)."""
    big = shape.hidden >= 1024
    mla = (["--kv-lora-rank", "512", "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128"] if big
           else ["--kv-lora-rank", "32", "--qk-head-dim", "16", "--qk-pos-emb-head-dim", "8", "--v-head-dim", "16"])
    experts = (["--num-experts", "64", "--moe-ffn-hidden-size", "1408", "--moe-shared-expert-intermediate-size", "2816",
                "--moe-router-topk", "6"] if big
               else ["--num-experts", "16", "--moe-ffn-hidden-size", "64", "--moe-shared-expert-intermediate-size", "128",
                     "--moe-router-topk", "4"])
    return ["--multi-latent-attention", *mla, "--qk-layernorm", "--rotary-base", "10000", "--rotary-scaling-factor", "40",
            "--mscale", "0.707", "--mscale-all-dim", "0.707", *experts,
            "--moe-layer-freq", f"([0]*1+[1]*{shape.layers - 1})", "--moe-router-pre-softmax",
            "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "0.001",
            "--moe-token-dispatcher-type", "alltoall", "--moe-router-dtype", "fp32"]


# One iteration's line of Megatron's training log: its number and lm loss.
ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+) \|")


def run_schedule(iters: int) -> list[str]:
    return ["--train-iters", str(iters), "--lr", "1e-4", "--min-lr", "1e-5", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "1", "--weight-decay", "0.1", "--adam-beta2", "0.95", "--clip-grad", "1.0",
            "--mock-data", "--tokenizer-type", "NullTokenizer", "--split", "99,1,0",
            "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "100000", "--seed", "1234"]


@dataclass
class Run:
    """One pretrain_gpt.py run's probe (rank 0) and how it went."""

    ok: bool
    seconds: float
    probe: dict = field(default_factory=dict)
    log: str = ""

    def step_seconds(self, warmup: int) -> list[float]:
        return self.probe.get("step_seconds", [])[warmup:]

    def losses(self) -> dict[int, float]:
        """{iteration: lm loss} as the training log printed them."""
        text = Path(self.log).read_text() if self.log else ""
        return {int(m[1]): float(m[2]) for m in ITERATION.finditer(text)}


def pretrain(tree: Path, argv: list[str], workdir: Path, *, device: str, memory: bool = False,
             profile_step: int = 0, timeout: float = 600, env: dict | None = None, processes: int = 1) -> Run:
    """torchrun --nproc-per-node PROCESSES pretrain_gpt.py ARGV under the probe (rank 0's is read);
    CPU runs add --distributed-backend gloo."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "probe"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_"))}
    child_env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no pool of compile workers per run
    child_env.update(ROCMPATCH_PROBE=str(out), ROCMPATCH_PROBE_PROFILE_STEP=str(profile_step),
                     ROCMPATCH_PROBE_MEMORY="1" if memory else "0", PYTHONPATH=str(tree), **(env or {}))
    from rocmpatch import launchers
    from rocmpatch.megatron_args import gpu_launch_environment, parse_argv

    if device == "cpu":
        child_env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
        argv = ["--distributed-backend", "gloo", *argv]
    else:
        child_env.update(gpu_launch_environment(parse_argv(argv), child_env))  # as `recipe launch` runs it
    command = launchers.torchrun([str(PROBE), str(tree / "pretrain_gpt.py"), *argv], nproc=processes,
                                 launcher=launchers.THIS_PYTHON).vector()
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=tree, env=child_env, capture_output=True, text=True, timeout=timeout, check=False)
        log, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired as expired:  # its output is bytes even with text=True
        partial = "".join(_text(part) for part in (expired.stdout, expired.stderr))
        log, ok = f"{partial}\nstopped after {timeout:g}s", False
    (workdir / "pretrain_gpt.log").write_text(log)
    result = Path(f"{out}.0.json")
    probe = json.loads(result.read_text()) if result.is_file() else {}
    return Run(ok and bool(probe.get("step_seconds")), time.perf_counter() - start, probe, str(workdir / "pretrain_gpt.log"))


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def estimate_for(shape: Shape, flags: list[str], tree: Path, device: str, gpus: int = 1):
    """rocmpatch's estimate (rocmpatch/recipes/memory.py) of this run's memory per GPU on `gpus`
    GPUs, with upstream's model read from the tree."""
    from rocmpatch.recipes.memory import UPSTREAM_MODEL, estimate, load_upstream_model

    path = tree / UPSTREAM_MODEL
    upstream = load_upstream_model(path.read_bytes(), str(path)) if path.is_file() else None
    return estimate(shape.recipe_args(flags), shape.vocab, gpus, upstream=upstream, device="cpu" if device == "cpu" else "gpu")
