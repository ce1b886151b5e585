#!/usr/bin/env bash
# Runs the data pipeline benchmark (bench_data) and records the results with the hardware:
#
#   scripts/data_bench.sh OUTDIR
#
# writes OUTDIR/results.csv, OUTDIR/output.txt and OUTDIR/hardware.txt. Thread counts
# default to 1, 2, 4, ... up to the number of cores (THREADS_LIST=1,2,4,8,16 to choose).
# Environment: BENCH_DATA (binary; default <repo>/build/bench_data), BENCH_DATA_DIR (where
# the synthetic benchmark shards are written; default ${TMPDIR:-/tmp}/colonnade_bench_data,
# about 0.8 GB raw + 0.1 GB JPEG), EXTRA_FLAGS (passed to bench_data), COMMIT (the tree's
# full hash, where git cannot tell: every file written names it, scripts/record_commit.py).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH_DATA:-$ROOT/build/bench_data}
DATA_DIR=${BENCH_DATA_DIR:-${TMPDIR:-/tmp}/colonnade_bench_data}
if [ ! -x "$BENCH" ]; then
  echo "data_bench.sh: $BENCH not found; build it (cmake --build build --target bench_data) or set BENCH_DATA" >&2
  exit 1
fi
mkdir -p "$OUT"
COMMIT=$(python3 "$ROOT/scripts/record_commit.py" --which)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $COMMIT"
  echo "host: $(uname -srm)"
  echo "cores: $(nproc)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -m1 "model name" /proc/cpuinfo || true
  free -g | head -2
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
} > "$OUT/hardware.txt"
ARGS=(--data_dir="$DATA_DIR" --csv="$OUT/results.csv")
[ -n "${THREADS_LIST:-}" ] && ARGS+=(--threads_list="$THREADS_LIST")
# shellcheck disable=SC2086
"$BENCH" "${ARGS[@]}" ${EXTRA_FLAGS:-} | tee "$OUT/output.txt"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/hardware.txt"
python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT" > /dev/null
echo "data_bench.sh: results in $OUT"
