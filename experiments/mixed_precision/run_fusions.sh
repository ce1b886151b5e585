#!/usr/bin/env bash
# One GPU call: what each layer fusion (core/net.h Fusions) saves, measured in one job --
# bench_train's bare step with every fusion, then with one of them off, for the models each
# applies to (bn_relu: ResNet-50, GoogLeNet; add_relu: ResNet-50; conv_relu: AlexNet,
# VGG-16; the LRN + max-pool fusion measured here before lost and lives in dev/lrn_pool,
# timed by dev's bench_dev, no longer a --fusions word),
# and the GPU tests of the fused kernels first (fused against unfused, bitwise). Builds
# cuda_tests and bench_train into BUILD_DIR when missing or stale.
#
#   COMMIT=<full hash> experiments/mixed_precision/run_fusions.sh OUTDIR [BUILD_DIR]
#
# Writes OUTDIR/fusions.jsonl (impl, model, mode, batch, fusions, img_per_s, peak_mem_bytes,
# commit, device), the logs with per-layer breakdowns, summary.txt and fusions.tgz with all
# of it. Knobs: MODE (bf16), CONFIGS ("model:batch:fusions-off ..."), SKIP_TESTS=1.
set -uo pipefail
OUT=${1:?usage: run_fusions.sh OUTDIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$ROOT/build-gpu}
MODE=${MODE:-bf16}
CONFIGS=${CONFIGS:-alexnet:256:conv_relu resnet50:128:bn_relu resnet50:128:add_relu googlenet:64:bn_relu vgg16:64:conv_relu}
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
trap 'python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT/summary.txt" > /dev/null 2>&1; tar czf "$OUT/fusions.tgz" -C "$OUT" --exclude=fusions.tgz . 2>/dev/null' EXIT
J=$OUT/fusions.jsonl
: > "$J"

t0=$(date +%s)
{ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF "${PREFIX[@]}" &&
  cmake --build "$BUILD" -j"$(nproc)" --target cuda_tests bench_train; } > "$OUT/build.log" 2>&1 ||
  { say "build FAILED"; tail -20 "$OUT/build.log"; exit 1; }
say "build ok in $(( $(date +%s) - t0 )) s"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 180 "$BUILD/tests/cuda/cuda_tests" --gtest_brief=1 \
    --gtest_filter='*LrnMaxPool*:*BatchNorm*:*Lrn*:*Pool*:*MemoryPlan*:*Relu*' \
    > "$OUT/gpu_tests_fusions.log" 2>&1
  say "GPU tests of the fused kernels rc=$?: $(grep -E '^\[ *(PASSED|FAILED)' "$OUT/gpu_tests_fusions.log" | tr '\n' ' ')"
fi

# One bench_train run: MODEL BATCH FUSIONS TAG.
bench() {
  local log=$OUT/bench_$1_$2_$4.log
  timeout 150 "$BUILD/bench_train" --model="$1" --batch_sizes="$2" --precision="$MODE" \
    --fusions="$3" --warmup=5 --steps=30 --breakdown=true --json="$OUT/raw_$1_$2_$4.json" \
    > "$log" 2>&1
  say "$1 b$2 $MODE fusions=$3: $(grep -E 'img/s' "$log" | head -1 | sed 's/|.*//')"
  python3 - "$OUT/raw_$1_$2_$4.json" "$COMMIT" "$DEV" >> "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({"impl": "colonnade", "what": "bench_train", "model": r["model"],
                      "mode": r["mode"], "batch": r["batch"], "fusions": r["fusions"],
                      "img_per_s": round(r["img_per_s"], 1),
                      "peak_mem_bytes": r["peak_in_use_bytes"], "loss_first": r["loss_first"],
                      "loss_last": r["loss_last"], "device": sys.argv[3],
                      "commit": sys.argv[2]}))
PY
}

declare -A done_all
for cfg in $CONFIGS; do
  IFS=: read -r model batch off <<< "$cfg"
  if [ -z "${done_all[$model:$batch]:-}" ]; then
    bench "$model" "$batch" all all
    done_all[$model:$batch]=1
  fi
  keep=$(echo conv_relu,bn_relu,add_relu | tr ',' '\n' | grep -vx "$off" | paste -sd, -)
  bench "$model" "$batch" "$keep" "no_$off"
done
say "done; $(wc -l < "$J") records in fusions.jsonl"
