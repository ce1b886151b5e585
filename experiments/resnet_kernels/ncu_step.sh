#!/usr/bin/env bash
# One training step's kernels under Nsight Compute (duration only), for the per-kernel tables
# of experiments/resnet_kernels/README.md: bench_train with plain launches (no CUDA graph),
# one warm-up and one timed step; kernel_table.py then takes the last step's kernels.
# ncu serialises the kernels, flushes the caches between them and fixes the clocks, so its
# times are a little longer than in the graphed step; the shares are what the tables use.
#   experiments/resnet_kernels/ncu_step.sh OUTDIR MODEL BATCH [bench_train flags...]
set -uo pipefail
OUT=${1:?usage: ncu_step.sh OUTDIR MODEL BATCH [flags]}
MODEL=${2:?model}
BATCH=${3:?batch}
shift 3
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
timeout 400 "$NCU" --csv --metrics gpu__time_duration.sum "$B/${BIN:-after}/bench_train" \
  --model="$MODEL" --precision=bf16 --batch_sizes="$BATCH" --steps=1 --warmup=1 \
  --breakdown=false --cuda_graphs=off "$@" > "$OUT/${MODEL}_b${BATCH}_ncu.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$? $(wc -l < "$OUT/${MODEL}_b${BATCH}_ncu.csv") lines"
gzip -f "$OUT/${MODEL}_b${BATCH}_ncu.csv"
