#!/usr/bin/env bash
# What bounds the convolution kernels: one bench_train step of MODEL at BATCH (plain launches,
# no warm-up step) under Nsight Compute with the sections that say it (speed of light, compute
# and memory workload, warp states, occupancy, launch), for the kernels whose names match
# KERNELS (default the wgmma convolutions), at most COUNT of them (default 60). ncu replays
# each kernel once per pass; its times are at fixed clocks with caches flushed. Writes
# OUTDIR/MODEL_bBATCH_details.csv.gz (ncu --page details); ncu_details_table.py reads it.
#   BIN=new experiments/resnet_kernels/ncu_details.sh OUTDIR vgg16 64
set -uo pipefail
OUT=${1:?usage: ncu_details.sh OUTDIR MODEL BATCH}
MODEL=${2:?model}
BATCH=${3:?batch}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
f=$OUT/${MODEL}_b${BATCH}_details.csv
# run [extra ncu flags]: the sections, plus the warps' stall reasons per issued instruction and
# the wgmma pipe's share of cycles where this ncu names them (regex metrics).
run() {
  timeout "${NCU_TIMEOUT:-300}" "$NCU" --csv --page details --print-units base \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    "$@" -k "regex:${KERNELS:-Wgmma}" --launch-count "${COUNT:-60}" \
    "$B/${BIN:-new}/bench_train" --model="$MODEL" --precision=bf16 --batch_sizes="$BATCH" \
    --steps=1 --warmup=0 --breakdown=false --cuda_graphs=off > "$f" 2> "$OUT/ncu_details.err"
}
run --metrics 'regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:^sm__pipe_tensor_op_gmma_cycles_active\.avg\.pct_of_peak_sustained_active$'
rc=$?
if [ $rc -ne 0 ] || ! grep -q "Duration" "$f"; then  # the metrics unknown here: sections only
  echo "ncu with the stall metrics rc=$rc: $(tail -c 300 "$OUT/ncu_details.err")"
  run
  rc=$?
fi
echo "ncu details rc=$rc $(grep -c . "$f") lines"
gzip -f "$f"
