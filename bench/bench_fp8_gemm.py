"""FP8 against BF16 GEMMs at the Llama recipes' linear-layer shapes: TFLOP/s of torch._scaled_mm
(patch fp8-tensorwise-local: --fp8-format hybrid --fp8-recipe tensorwise without TE) and of the BF16
matmul, and their ratio, per shape.

    python bench/bench_fp8_gemm.py [--tree DIR] [--release NAME] [--device auto|cpu|cuda] [--repeat 5]

For each Llama recipe (rocmpatch/recipes/llama*.yaml, its first layout's tensor parallel size) the
four linear layers one GPU computes per micro-batch: QKV, the attention projection, fc1 (SwiGLU's
doubled width) and fc2, over micro-batch x sequence tokens. Per shape, three timings of one layer's
forward, grad-input and grad-weight GEMMs together:
- bf16: the three torch.matmul calls of the local linear layer;
- fp8 gemm: the three torch._scaled_mm calls alone, operands already quantized (the GEMM kernels);
- fp8 layer: TensorwiseFp8.forward / dgrad / wgrad, casts and amax included (what training runs).
The ratios fp8 / bf16 are printed; "fp8 layer / fp8 gemm" shows what the casts cost (torchao's
float8 training leaves those casts to torch.compile to fuse; this module runs them eagerly).
On a GPU the recipe shapes as they are; on the CPU (whose FP8 kernel is a reference loop) every
dimension / 32 (to a multiple of 16) and 128 tokens, so it runs in seconds and says nothing about
a GPU. --tree: a tree with the series applied; without it megatron/ of the release's test wheel
with its series, in a temporary directory. Asserts nothing; not in CI. No GPU figure was measured by this project yet.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's rocmpatch and testkit
MODULE = "megatron/core/extensions/torch_fp8.py"
CPU_SCALE, CPU_TOKENS = 32, 128


def load_module(tree: Path):
    """torch_fp8.py of the tree, alone (it imports only torch): no Megatron import needed."""
    spec = importlib.util.spec_from_file_location("torch_fp8", tree / MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_tree(dest: Path, release: str | None) -> Path:
    from rocmpatch.releases import choose
    from testkit import harness

    chosen = harness.Release(choose(None, release).release)
    return harness.wheel_tree(chosen, dest, chosen.patches())


def recipe_shapes() -> list[tuple[str, int, int, int]]:
    """(label, tokens, in_features, out_features) of each Llama recipe's four linear layers on one GPU."""
    from rocmpatch.megatron_args import ParallelLayout
    from rocmpatch.recipes.catalog import find, names

    shapes = []
    for name in names():
        if not name.startswith("llama"):
            continue
        recipe = find(name)
        layout = recipe.layouts[0]
        args = recipe.merged_args(layout)
        tp = ParallelLayout.of(args, layout.world_size).tp
        hidden, ffn, heads = int(args["--hidden-size"]), int(args["--ffn-hidden-size"]), int(args["--num-attention-heads"])
        groups = int(args.get("--num-query-groups") or heads)
        head_dim = int(args.get("--kv-channels") or hidden // heads)
        tokens = int(args.get("--micro-batch-size", 1)) * int(args["--seq-length"])
        label = f"{name} TP {tp}"
        shapes += [(f"{label} qkv", tokens, hidden, (heads + 2 * groups) * head_dim // tp),
                   (f"{label} proj", tokens, heads * head_dim // tp, hidden),
                   (f"{label} fc1", tokens, hidden, 2 * ffn // tp),
                   (f"{label} fc2", tokens, ffn // tp, hidden)]
    unique: dict[tuple, str] = {}
    for label, *shape in shapes:  # llama3-8b-fp8 has llama3-8b's shapes
        unique.setdefault(tuple(shape), label)
    return [(label, *shape) for shape, label in unique.items()]


def timed(run, device, repeat: int) -> float:
    """Best of `repeat` calls after one warm-up, in seconds (CPU time on the CPU: the machine is shared)."""
    import torch

    clock = time.perf_counter if device.type == "cuda" else time.process_time
    run()
    best = float("inf")
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = clock()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, clock() - start)
    return best


def bench_shape(fp8, device, tokens: int, n_in: int, n_out: int, repeat: int) -> dict:
    import torch

    recipe = fp8.TensorwiseFp8(hybrid=True)
    fwd, bwd = recipe.formats(device)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, n_in, generator=generator).to(device=device, dtype=torch.bfloat16)
    w = (torch.randn(n_out, n_in, generator=generator) * n_in ** -0.5).to(device=device, dtype=torch.bfloat16)
    g = torch.randn(tokens, n_out, generator=generator).to(device=device, dtype=torch.bfloat16)
    (xq, xs), (wq, ws), (gq, gs) = fp8.quantize(x, fwd), fp8.quantize(w, fwd), fp8.quantize(g, bwd)
    wq_t, gq_t, xq_cols = fp8._column_major(wq), gq.t().contiguous(), fp8._column_major(xq)

    def bf16():
        torch.matmul(x, w.t()), g.matmul(w), g.t().matmul(x)

    def fp8_gemm():
        torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)
        torch._scaled_mm(gq, wq_t, scale_a=gs, scale_b=ws, out_dtype=torch.bfloat16)
        torch._scaled_mm(gq_t, xq_cols, scale_a=gs, scale_b=xs, out_dtype=torch.bfloat16)

    def fp8_layer():
        recipe.forward(x, w), recipe.dgrad(g, w), recipe.wgrad(g, x)

    flops = 3 * 2 * tokens * n_in * n_out
    seconds = {name: timed(run, device, repeat) for name, run in
               (("bf16", bf16), ("fp8 gemm", fp8_gemm), ("fp8 layer", fp8_layer))}
    return {name: flops / s / 1e12 for name, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path)
    parser.add_argument("--release", default=None)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import torch

    on_gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    with tempfile.TemporaryDirectory() as scratch:
        tree = args.tree or build_tree(Path(scratch) / "tree", args.release)
        fp8 = load_module(tree)
        try:
            formats = fp8.probe(device)
        except fp8.Fp8Unavailable as error:
            raise SystemExit(f"no FP8 GEMM on {device}: {error}") from None
        where = torch.cuda.get_device_name(0) if on_gpu else f"CPU, shapes / {CPU_SCALE}, {CPU_TOKENS} tokens"
        print(f"FP8 (tensorwise, hybrid; {formats}) against BF16 GEMMs, forward + grad-input + grad-weight, "
              f"best of {args.repeat}, torch {torch.__version__}, {where}")
        print(f"{'shape':<28} {'tokens x in -> out':>22} {'bf16':>8} {'fp8 gemm':>9} {'fp8 layer':>10} "
              f"{'gemm/bf16':>10} {'layer/bf16':>11}  (TFLOP/s)")
        for label, tokens, n_in, n_out in recipe_shapes():
            if not on_gpu:  # scaled down, each side still a multiple of 16 (torch._scaled_mm's rule)
                tokens, n_in, n_out = CPU_TOKENS, *(max(16, round(n / CPU_SCALE / 16) * 16) for n in (n_in, n_out))
            r = bench_shape(fp8, device, tokens, n_in, n_out, 1 if not on_gpu else args.repeat)
            print(f"{label:<28} {f'{tokens} x {n_in} -> {n_out}':>22} {r['bf16']:8.3g} {r['fp8 gemm']:9.3g} "
                  f"{r['fp8 layer']:10.3g} {r['fp8 gemm'] / r['bf16']:9.3g}x {r['fp8 layer'] / r['bf16']:10.3g}x")


if __name__ == "__main__":
    main()
