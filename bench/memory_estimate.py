"""rocmpatch's memory estimate per GPU (rocmpatch/recipes/memory.py) against the measured peak, for
small Llama-, MoE- and MLA-shaped runs of upstream's pretrain_gpt.py on the CPU (the torch path's
fast flags, one process over gloo, bf16, distributed optimizer, three iterations).

    python bench/memory_estimate.py --target DIR [--configs A B C D E]

--target: a Megatron-LM tree with its release's series applied (`rocmpatch apply`); upstream's
theoretical_memory_usage.py is read from it. Peak: the live CPU tensor bytes summed from the torch
profiler's memory events over the whole run (bench/pretrain_probe.py), i.e. what the allocator held
for tensors, not the process's RSS. Prints the ratio; asserts nothing; not in CI.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_runs import FAST_FLAGS, Shape, estimate_for, pretrain, run_schedule  # noqa: E402

MIB = 1 << 20
CONFIGS = {
    # loss-heavy: a vocabulary of 8192 makes the cross entropy's fp32 tensors the larger part
    "A": (Shape("A", 2, 256, 704, 8, 2, 512, 8192, 2, 2), []),
    # layer-heavy: four layers, sequence 1024, a small vocabulary
    "B": (Shape("B", 4, 384, 1024, 6, 2, 1024, 2048, 1, 1), []),
    # B with full recompute: each layer keeps only its input
    "C": (Shape("C", 4, 384, 1024, 6, 2, 1024, 2048, 1, 1),
          ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]),
    # Qwen3-MoE-like: QK norm, heads of 64 apart from hidden / heads, every layer 8 experts top-2
    "D": (Shape("D", 4, 384, 1024, 6, 2, 1024, 2048, 1, 1),
          ["--kv-channels", "64", "--qk-layernorm", "--num-experts", "8", "--moe-router-topk", "2",
           "--moe-ffn-hidden-size", "256", "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-3",
           "--moe-router-dtype", "fp32", "--moe-token-dispatcher-type", "alltoall"]),
    # DeepSeek-V2-Lite-like: MLA (kv latent, no q latent, 48 + 16 / 32 heads), the first layer dense,
    # then 8 experts top-3 with a shared expert
    "E": (Shape("E", 4, 384, 1024, 6, 6, 1024, 2048, 1, 1),
          ["--multi-latent-attention", "--kv-lora-rank", "128", "--qk-head-dim", "48", "--qk-pos-emb-head-dim", "16",
           "--v-head-dim", "32", "--qk-layernorm", "--num-experts", "8", "--moe-layer-freq", "[0,1,1,1]",
           "--moe-ffn-hidden-size", "256", "--moe-shared-expert-intermediate-size", "512", "--moe-router-topk", "3",
           "--moe-router-pre-softmax", "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "1e-3",
           "--moe-router-dtype", "fp32", "--moe-token-dispatcher-type", "alltoall"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    tree = args.target.resolve()
    print(f"{'config':<7} {'shape':<44} {'estimate MiB':>12} {'measured MiB':>12} {'est/meas':>8}  peak during")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="rocmpatch-memory-") as scratch:
        for name in args.configs:
            shape, extra = CONFIGS[name]
            flags = [*FAST_FLAGS, *extra]
            run = pretrain(tree, [*shape.args(), *flags, *run_schedule(3)], Path(scratch) / name, device="cpu", memory=True,
                           timeout=1800, env={"OMP_NUM_THREADS": "2"})
            if not run.ok:
                print(f"{name}: pretrain_gpt.py failed, see {run.log}", file=sys.stderr)
                return 1
            est = estimate_for(shape, flags, tree, "cpu")
            measured = run.probe["peak_bytes"] / MIB
            estimated = est.total_gib * 1024
            ratio = estimated / measured
            worst = max(worst, abs(ratio - 1))
            kind = {"C": " full-recompute", "D": " MoE", "E": " MLA+MoE"}.get(name, "")
            desc = f"L{shape.layers} h{shape.hidden} f{shape.ffn} s{shape.seq} b{shape.micro_batch} V{shape.vocab}{kind}"
            print(f"{name:<7} {desc:<44} {estimated:12.1f} {measured:12.1f} {ratio:8.3f}  {' > '.join(run.probe.get('peak_during', [])[-2:])}")
            print(f"{'':<7} estimate: weights+grads {est.weights_and_grads_gib * 1024:.1f}, optimizer {est.optimizer_gib * 1024:.1f}, "
                  f"activations {est.activations_gib * 1024:.1f} (upstream's formula: {(est.upstream_activations_gib or 0) * 1024:.1f}), "
                  f"temporaries {est.temporaries_gib * 1024:.1f} MiB; weights and optimizer from {est.source}", flush=True)
    print(f"largest |estimate / measured - 1|: {worst:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
