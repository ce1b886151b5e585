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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -d /opt/absl/usr ]; then
  for deb in "$ROOT"/.deps/libabsl*.deb; do dpkg -x "$deb" /opt/absl; done
fi
export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
B=$ROOT/.gpu_bin
# The binaries travel as one xz archive (the 64 MiB a call may carry): .gpu_bin/pack/bins.tar.xz.
if [ -f "$B/pack/bins.tar.xz" ]; then tar xJf "$B/pack/bins.tar.xz" -C "$B"; fi
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
if [ -n "${FILTER:-}" ] && [ -x "$B/after/cuda_tests" ]; then
  t0=$(date +%s)
  timeout 300 "$B/after/cuda_tests" --gtest_filter="$FILTER" --gtest_brief=1 > "$OUT/tests.log" 2>&1
  say "cuda_tests ($FILTER) rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E '\[  (PASSED|FAILED)  \]' "$OUT/tests.log" | tr '\n' ' ')"
fi
# RUNS: binary@fusions pairs timed in turn (the fusions flag as bench_train takes it).
RUNS=${RUNS:-"before@default after@default"}
for round in 1 2; do
  for mb in ${MODELS:-resnet50:128}; do
    m=${mb%:*} b=${mb#*:}
    for r in $RUNS; do
      v=${r%@*} f=${r#*@}
      [ -x "$B/$v/bench_train" ] || continue
      tag=$v-${f//,/+}
      log=$OUT/${m}_b${b}_${tag}_r$round.log
      timeout 240 "$B/$v/bench_train" --model="$m" --precision=bf16 --batch_sizes="$b" \
        --fusions="$f" --steps=20 --breakdown="$([ $round = 1 ] && echo true || echo false)" \
        > "$log" 2>&1
      say "$m b$b $tag round $round rc=$?: $(grep -oE '[0-9]+ img/s \([0-9.]+ ms/step' "$log" | head -1)"
    done
  done
done
