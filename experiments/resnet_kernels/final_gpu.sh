#!/usr/bin/env bash
# A session's closing measurement in one device call: next_gpu.sh on this checkout alone
# (build, GPU suite, the six headline jobs, the compiled ResNet-50 peer, breakdowns,
# --recompute=off; no bench_layers), then one ResNet-50 b128 step under Nsight Compute
# (ncu_step.sh: durations per kernel, for kernel_table.py).
#   COMMIT_NEW=$(git rev-parse HEAD) experiments/resnet_kernels/final_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: final_gpu.sh OUTDIR}
E=$(dirname "$0")
DEADLINE=0 "$E/next_gpu.sh" "$OUT"
t0=$(date +%s)
BIN=new "$E/ncu_step.sh" "$OUT" resnet50 128 >> "$OUT/summary.txt" 2>&1
echo "ncu step in $(( $(date +%s) - t0 )) s" >> "$OUT/summary.txt"
