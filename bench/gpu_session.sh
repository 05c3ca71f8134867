#!/usr/bin/env bash
# One short GPU session, for a machine lent for minutes: the machine's facts, the throughput bench
# (fast against explicit attention, the fast path in FP8, the MoE block with sequential and grouped
# experts), the FP8 against BF16 GEMM micro-bench at the Llama recipes' shapes, the grouped-GEMM
# micro-bench at DeepSeek-V2-Lite's expert shape, `rocmpatch smoke` on GPU 0 for each tree given,
# then the launch script (examples/pretrain_gpt_rocm.sh) trains, saves and resumes on the first tree.
#
#   bench/gpu_session.sh OUT_DIR TREE_TGZ:RELEASE [TREE_TGZ:RELEASE ...]
#
# Each tarball holds a patched tree (`tar czf t.tgz -C Megatron-LM megatron pretrain_gpt.py
# gpt_builders.py model_provider.py` for core_v0.19.0; the whole tree without .git for core_v0.5.0).
# The benches run on the first tree. LAYERS and STEPS bound the throughput bench's time (default 4
# layers, 8 steps: about 3 minutes on one H100 for fast and explicit; --fp8 adds one path, --moe two);
# rocmpatch runs from this checkout. Results go to OUT_DIR.
set -u
export PYTHONUNBUFFERED=1
out=$1; shift
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
{ nvidia-smi -L || rocm-smi --showproductname; python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda or torch.version.hip, torch.cuda.get_device_name(0))'; } 2>&1 | tee "$out/facts.txt"
first=1
for spec in "$@"; do
    tarball=${spec%%:*} release=${spec##*:}
    tree=$(mktemp -d) && tar xzf "$tarball" -C "$tree" || exit 1
    if [ "$first" = 1 ]; then
        first=0
        example_tree=$tree
        timeout 480 python3 "$repo/bench/train_throughput.py" --target "$tree" --skip-smoke --skip-context-parallel \
            --fp8 --moe --layers "${LAYERS:-4}" --steps "${STEPS:-8}" --out "$out/throughput.json" 2>&1 | tee "$out/throughput.log"
        echo "bench exit ${PIPESTATUS[0]}"
        timeout 120 python3 "$repo/bench/bench_fp8_gemm.py" --tree "$tree" --device cuda 2>&1 | tee "$out/fp8_gemm.log"
        echo "fp8 gemm bench exit ${PIPESTATUS[0]}"
        timeout 120 python3 "$repo/bench/bench_grouped_gemm.py" --tree "$tree" --device cuda --experts 64 --hidden 2048 \
            --ffn 1408 --tokens 32768 --repeat 10 2>&1 | tee "$out/grouped_gemm.log"
        echo "grouped gemm bench exit ${PIPESTATUS[0]}"
    fi
    PYTHONPATH=$repo timeout 240 python3 -m rocmpatch smoke --target "$tree" --release "$release" --gpus 0 --json \
        >"$out/smoke-$release.json" 2>"$out/smoke-$release.err"
    echo "smoke $release exit $?"
    python3 -c 'import json, sys; [print(s["name"], s["status"], str(s.get("detail", ""))[:300]) for s in json.load(open(sys.argv[1]))["stages"]]' \
        "$out/smoke-$release.json" || tail -20 "$out/smoke-$release.err"
done
# The launch script as a user runs it: 20 iterations with a checkpoint, then resumed to 30.
for iters in 20 30; do
    timeout 150 bash "$repo/examples/pretrain_gpt_rocm.sh" --megatron-dir "$example_tree" --gpus 1 --num-layers 2 \
        --hidden-size 256 --num-heads 8 --seq-length 256 --train-iters "$iters" --log-interval 5 \
        --checkpoint-dir "$out/example-ckpt" >"$out/example-$iters.log" 2>&1
    echo "example $iters iterations exit $?"
    grep -E "iteration +[0-9]+/|loaded checkpoint" "$out/example-$iters.log" | cut -c1-200 | tail -4
done
