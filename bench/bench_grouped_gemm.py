"""MoE experts: one torch grouped GEMM per linear (TorchGroupedMLP, --moe-grouped-gemm without TE,
patch moe-grouped-gemm-local) against one GEMM per expert (SequentialMLP), forward + backward of
the experts module at a shape with many experts.

    python bench/bench_grouped_gemm.py [--tree DIR] [--release NAME] [--experts 64] [--hidden 512]
                                       [--ffn 256] [--tokens 8192] [--dtype bf16|fp32] [--device cpu|cuda]
                                       [--repeat 3]

--tree: a Megatron-LM tree with the series applied (`rocmpatch apply --target DIR`); without it,
megatron/ of the release's test wheel with the series applied through moe-grouped-gemm-local,
written to a temporary directory. The harness is testkit/checks/grouped_gemm.py (the one the
series tests run): both modules are built from one seed, SwiGLU, no bias; --tokens routed token
copies are spread over the experts at random (some may get none). Each path runs in its own child
process: one warm-up step, then the best of --repeat steps. Prints the times and the ratio
(sequential / grouped, above 1: grouped is faster) and which kernel the grouped path said it ran.
Asserts nothing; not in CI. The default shape is DeepSeek-V2-Lite's expert count (64) with a
smaller hidden size, so a CPU run takes seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from child_json import run_json_child  # bench/, beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch and testkit


def release_of(tree: Path | None, asked: str | None) -> str:
    from rocmpatch.releases import choose

    return choose(None, asked, target=tree).release


def build_tree(dest: Path, release: str) -> Path:
    from testkit import harness

    chosen = harness.Release(release)
    return harness.wheel_tree(chosen, dest, chosen.patches())


def child(args: argparse.Namespace) -> None:
    """One path: prints {"seconds": ..., "said": [...]}."""
    sys.path.insert(0, str(args.tree))  # the tree's megatron first, before this checkout
    import importlib

    checks = importlib.import_module("testkit.checks.grouped_gemm")
    said = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("megatron.core.transformer.moe.torch_grouped_mlp").addHandler(Said())
    logging.getLogger("megatron.core.transformer.moe.torch_grouped_mlp").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as work:
        checks.setup(Path(work))
        import torch

        dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
        cfg = checks.config(hidden_size=args.hidden, ffn_hidden_size=args.ffn, moe_ffn_hidden_size=args.ffn,
                            num_moe_experts=args.experts, dtype=dtype)
        module = checks.build(args.path, cfg)
        generator = torch.Generator().manual_seed(0)
        choice = torch.randint(0, args.experts, (args.tokens,), generator=generator)
        counts = torch.bincount(choice, minlength=args.experts)
        hidden = torch.randn(args.tokens, args.hidden, generator=generator).to(device=args.device, dtype=dtype)
        hidden.requires_grad_()
        probs = torch.rand(args.tokens, generator=generator).to(args.device)
        grad = torch.randn(args.tokens, args.hidden, generator=generator).to(device=args.device, dtype=dtype)
        cuda = args.device != "cpu"

        def step():
            module.zero_grad(set_to_none=True)
            hidden.grad = None
            output, _ = module(hidden, counts, probs)
            output.backward(grad)
            if cuda:
                torch.cuda.synchronize()

        step()
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "class": type(module).__name__, "said": said,
                      "empty_experts": int((counts == 0).sum())}))


def run_path(args: argparse.Namespace, tree: Path, path: str) -> dict:
    command = [sys.executable, __file__, "--child", "--tree", str(tree), "--path", path,
               "--experts", str(args.experts), "--hidden", str(args.hidden), "--ffn", str(args.ffn),
               "--tokens", str(args.tokens), "--dtype", args.dtype, "--device", args.device, "--repeat", str(args.repeat)]
    return run_json_child(command, args.device, f"{path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--release", default=None)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    release = release_of(args.tree, args.release)
    with tempfile.TemporaryDirectory() as scratch:
        tree = args.tree or build_tree(Path(scratch) / "tree", release)
        print(f"MoE experts {release}: {args.experts} experts, hidden {args.hidden}, SwiGLU ffn {args.ffn}, "
              f"{args.tokens} routed tokens, {args.dtype}, {args.device}, forward+backward, best of {args.repeat}")
        grouped, sequential = run_path(args, tree, "grouped"), run_path(args, tree, "sequential")
        assert grouped["class"] == "TorchGroupedMLP" and sequential["class"] == "SequentialMLP"
        print(f"experts with no token: {grouped['empty_experts']}")
        print(f"grouped    ({grouped['class']}): {grouped['seconds']:.4f} s")
        print(f"sequential ({sequential['class']}): {sequential['seconds']:.4f} s")
        print(f"sequential / grouped: {sequential['seconds'] / grouped['seconds']:.2f}x (above 1: grouped is faster)")
        for line in grouped["said"]:
            print(f"grouped path said: {line}")


if __name__ == "__main__":
    main()
