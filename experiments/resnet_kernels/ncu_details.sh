#!/usr/bin/env bash
# What bounds the convolution kernels: one bench_train step of MODEL at BATCH (plain launches,
# no warm-up step) under Nsight Compute with the sections that say it (speed of light, compute
# and memory workload, warp states, occupancy, launch), for the kernels whose names match
# KERNELS (default the wgmma convolutions), at most COUNT of them (default 60). ncu replays
# each kernel once per pass; its times are at fixed clocks with caches flushed. Writes
# OUTDIR/MODEL_bBATCH_details.csv.gz (ncu --page details) and MODEL_bBATCH_details_raw.csv.gz
# (--page raw); ncu_details_table.py reads them.
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
# The sections' values (--page details: throughputs, occupancy, launch, the rules' text), then
# the same kernels' raw metrics of the warp-state and compute sections (--page raw: every
# stall reason's warps per issued instruction, every pipe's share of cycles), which the
# details page only charts.
ncu_run() {  # PAGE FILE SECTION...
  local page=$1 file=$2
  shift 2
  local sections=()
  for s in "$@"; do sections+=(--section "$s"); done
  timeout "${NCU_TIMEOUT:-300}" "$NCU" --csv --page "$page" --print-units base "${sections[@]}" \
    -k "regex:${KERNELS:-Wgmma}" --launch-count "${COUNT:-60}" \
    "$B/${BIN:-new}/bench_train" --model="$MODEL" --precision=bf16 --batch_sizes="$BATCH" \
    --steps=1 --warmup=0 --breakdown=false --cuda_graphs=off > "$file" 2> "$OUT/ncu_details.err"
  echo "ncu $page rc=$? $(grep -c . "$file") lines"
  gzip -f "$file"
}
# PAGES: which of the two (default both).
case " ${PAGES:-details raw} " in *" details "*)
  ncu_run details "$f" SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis \
    WarpStateStats Occupancy LaunchStats SchedulerStats ;;
esac
case " ${PAGES:-details raw} " in *" raw "*)
  ncu_run raw "${f%.csv}_raw.csv" SpeedOfLight ComputeWorkloadAnalysis WarpStateStats ;;
esac
