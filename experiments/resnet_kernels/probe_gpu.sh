#!/usr/bin/env bash
# Issue 34's quick probes on the device, with binaries built here and carried (.gpu_bin/before,
# .gpu_bin/after; Abseil's Debian packages and libjpeg in .deps): the GPU tests named by
# FILTER, then bench_train on the models of MODELS ("model:batch") for each of RUNS
# ("binary@fusions", in turn; round 1 with the per-layer breakdown, round 2 without), one log
# per run under OUTDIR. The binaries travel as
# .gpu_bin/pack/bins.tar.xz (before/ and after/ inside), carried with .deps.
#   FILTER='*Wgmma*' MODELS="resnet50:128 vgg16:64" experiments/resnet_kernels/probe_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: probe_gpu.sh OUTDIR}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
if [ -n "${FILTER:-}" ] && [ -x "$B/after/cuda_tests" ]; then
  # FILTER=all: the whole suite in 8 gtest shards at once (one GPU, shared).
  t0=$(date +%s)
  shards=1 f=$FILTER
  [ "$FILTER" = all ] && shards=8 f='*'
  pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout 400 "$B/after/cuda_tests" \
      --gtest_filter="$f" --gtest_brief=1 > "$OUT/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  cat "$OUT"/tests.*.log > "$OUT/tests.log" && rm -f "$OUT"/tests.*.log
  pass=$(grep -oE "\[  PASSED  \] [0-9]+" "$OUT/tests.log" | grep -oE "[0-9]+$" | paste -sd+ | bc)
  fail=$(grep -cE "^\[  FAILED  \] [A-Za-z]" "$OUT/tests.log")
  say "cuda_tests ($FILTER) rc=$rc in $(( $(date +%s) - t0 )) s: ${pass:-0} passed, $fail failed"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$OUT/tests.log" | sort -u | head -20 >&2
fi
# RUNS: binary@fusions[@one-more-flag] timed in turn (the fusions flag as bench_train takes it).
RUNS=${RUNS:-"before@default after@default"}
for round in 1 2; do
  for mb in ${MODELS:-resnet50:128}; do
    m=${mb%:*} b=${mb#*:}
    for r in $RUNS; do
      v=${r%%@*} rest=${r#*@}
      f=${rest%%@*} x=""
      [ "$rest" != "$f" ] && x=${rest#*@}
      [ -x "$B/$v/bench_train" ] || continue
      tag=$v-${f//,/+}${x:+-${x//[^a-z0-9_]/}}
      log=$OUT/${m}_b${b}_${tag}_r$round.log
      timeout 240 "$B/$v/bench_train" --model="$m" --precision=bf16 --batch_sizes="$b" \
        --fusions="$f" ${x:+"$x"} --steps=20 --breakdown="$([ $round = 1 ] && echo true || echo false)" \
        > "$log" 2>&1
      say "$m b$b $tag round $round rc=$?: $(grep -oE '[0-9]+ img/s \([0-9.]+ ms/step' "$log" | head -1)"
    done
  done
done
