#!/usr/bin/env bash
# One command for the GPU machine: configure with CUDA, build the CUDA backend, its tests and
# benchmarks, run the GPU tests (ctest -R cuda), bench_layers (ours vs cuDNN per AlexNet
# conv layer), bench_train (AlexNet step, img/s), the trainer itself on the same step and
# the PyTorch peer, write the logs under
# OUTDIR and print a short summary table last.
#
#   scripts/gpu_check.sh OUTDIR
#
# OUTDIR receives at most 8 files (build.log tests.log bench_layers.log layers.csv
# bench_train.log pytorch.log results.jsonl summary.md). Environment knobs:
#   BUILD_DIR        build directory (default build-gpu)
#   SANITIZE=1       also run a few small tests under compute-sanitizer memcheck
#   APP_TESTS=REGEX  also run the trainer-script GPU tests (ctest -L cuda) matching REGEX
#   SHARDS=N         run the GPU suite as N gtest shards at once (default 1)
#   TARGETS          what to build (default: every target the steps below use)
#   SKIP_TESTS=1     skip ctest;  SKIP_LAYERS=1, SKIP_TRAIN=1, SKIP_TRAINER=1, SKIP_PEER=1 skip
#                    the benchmarks (TRAINER: the whole trainer's img/s on AlexNet, batch 128)
#   PEER_MODES       PyTorch modes (default fp32,fp32_cl,tf32,bf16_compile)
#   TRAIN_MODES      bench_train's AlexNet step (with its per-layer breakdown) in these modes:
#                    fp32, tf32, bf16 (wgmma convolutions where they run), bf16_wgmma (bf16
#                    with --conv_config=wgmma), bf16_mma (bf16 with --conv_config=mma); default fp32
#   BATCHES          batch sizes (default 128,256)
#   COMMIT           the tree's full hash (the device machine's copy has no git history);
#                    results.jsonl and layers.csv name it (scripts/record_commit.py)
# Where /opt/absl/usr exists (Abseil unpacked from Debian packages on a machine without
# it), it is passed to CMake and its libraries are put on LD_LIBRARY_PATH.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
BATCHES=${BATCHES:-128,256}
TRAIN_MODES=${TRAIN_MODES:-fp32}
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.md" >&2; }
COMMIT=$(python3 "$ROOT/scripts/record_commit.py" --which)
: > "$OUT/summary.md"

{
  echo "## environment"; date -u; nvidia-smi || true; nvcc --version | tail -2
  echo "commit $COMMIT"; git -C "$ROOT" status --short 2>/dev/null | head -20
  echo "## configure"
} > "$OUT/build.log" 2>&1
t0=$(date +%s)
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF "${PREFIX[@]}" >> "$OUT/build.log" 2>&1; then
  status "configure FAILED (see build.log)"; tail -30 "$OUT/build.log"; exit 1
fi
echo "## build" >> "$OUT/build.log"
# shellcheck disable=SC2206
TARGETS=(${TARGETS:-colonnade_cuda cuda_tests bench_train bench_layers trainer make_shards checkpoint_diff})
if ! cmake --build "$BUILD" -j16 --target "${TARGETS[@]}" >> "$OUT/build.log" 2>&1; then
  status "build FAILED (see build.log)"; grep -E "error" "$OUT/build.log" | head -30; exit 1
fi
status "build ok in $(( $(date +%s) - t0 )) s"

if [ -z "${SKIP_TESTS:-}" ]; then
  t0=$(date +%s)
  # The GPU suite's binary in SHARDS processes at once (default 1; gtest's sharding: each
  # process one CUDA context, ctest would start one per case). Most of the suite's time is
  # the CPU reference of the large cases, so shards on a many-core host finish sooner.
  shards=${SHARDS:-1}
  : > "$OUT/tests.log"
  pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout 420 "$BUILD/tests/cuda/cuda_tests" \
      --gtest_brief=1 > "$OUT/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  # gtest's own totals per shard, summed (ctest -V and --output-on-failure may print the
  # output twice, so the first total of each log).
  pass=0 fail=0 skip=0
  for ((i = 0; i < shards; ++i)); do
    f=$OUT/tests.$i.log
    n=$(grep -oE "\[  PASSED  \] [0-9]+" "$f" | head -1 | grep -oE "[0-9]+$"); pass=$((pass + ${n:-0}))
    n=$(grep -oE "\[  FAILED  \] [0-9]+ test" "$f" | head -1 | grep -oE "[0-9]+"); fail=$((fail + ${n:-0}))
    n=$(grep -oE "\[  SKIPPED \] [0-9]+ test" "$f" | head -1 | grep -oE "[0-9]+"); skip=$((skip + ${n:-0}))
    { [ "$shards" -gt 1 ] && echo "## shard $i of $shards"; cat "$f"; } >> "$OUT/tests.log"
    rm -f "$f"
  done
  status "tests rc=$rc: $pass passed, $fail failed, $skip skipped in $(( $(date +%s) - t0 )) s"
  grep -E "\[  FAILED  \] [A-Za-z]|losses cpu/gpu" "$OUT/tests.log" | sort -u | head -20 >&2
  if [ -n "${APP_TESTS:-}" ]; then
    # The GPU tests that are scripts around the trainer (ctest label cuda, not the gtest
    # suite above), those matching the regex APP_TESTS (e.g. 'bf16|precision', or '.').
    t0=$(date +%s)
    (cd "$BUILD" && timeout 300 ctest -L cuda -E '^cuda\.' -R "$APP_TESTS" --output-on-failure) \
      > "$OUT/app_tests.log" 2>&1
    status "app GPU tests rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E "tests passed" "$OUT/app_tests.log")"
    cat "$OUT/app_tests.log" >> "$OUT/tests.log"; rm -f "$OUT/app_tests.log"
  fi
  if [ -n "${SANITIZE:-}" ] && command -v compute-sanitizer > /dev/null; then
    # Out-of-bounds accesses on a few small shapes of every kernel family (slow, so few).
    t0=$(date +%s)
    timeout 120 compute-sanitizer --tool memcheck --print-limit 10 "$BUILD/tests/cuda/cuda_tests" \
      --gtest_filter="${SANITIZE_FILTER:-*n7_c5*:*n4_c6*:*n33_c3*:*n5_c3*:*n32_c3*:*Misaligned*:*Pooling*:*Lrn*:*Bias*:*Softmax*:*BatchNorm*:*Bf16*}" \
      > "$OUT/sanitizer.log" 2>&1
    status "compute-sanitizer memcheck rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E "ERROR SUMMARY" "$OUT/sanitizer.log" | tail -1)"
    # Shared-memory races (the cp.async pipelines) on a small convolution, every version.
    t0=$(date +%s)
    timeout 120 compute-sanitizer --tool racecheck --print-limit 10 "$BUILD/tests/cuda/cuda_tests" \
      --gtest_filter="*ConvTest.*n4_c6*:*ConvTest.*n1_c3*" >> "$OUT/sanitizer.log" 2>&1
    status "compute-sanitizer racecheck rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/sanitizer.log" | tail -1)"
    cat "$OUT/sanitizer.log" >> "$OUT/tests.log"; rm -f "$OUT/sanitizer.log"
  fi
fi

if [ -z "${SKIP_LAYERS:-}" ]; then
  t0=$(date +%s)
  NVIDIA_TF32_OVERRIDE=0 timeout 240 "$BUILD/bench_layers" --batch_sizes="$BATCHES" \
    --csv="$OUT/layers.csv" > "$OUT/bench_layers.log" 2>&1
  status "bench_layers rc=$? in $(( $(date +%s) - t0 )) s"
fi

: > "$OUT/results.jsonl"
if [ -z "${SKIP_TRAIN:-}" ]; then
  t0=$(date +%s)
  : > "$OUT/bench_train.log"
  for m in ${TRAIN_MODES//,/ }; do
    flags=(--precision="$m")
    [ "$m" = bf16_wgmma ] && flags=(--precision=bf16 --conv_config=wgmma)
    [ "$m" = bf16_mma ] && flags=(--precision=bf16 --conv_config=mma)
    echo "## bench_train ${flags[*]}" >> "$OUT/bench_train.log"
    timeout 120 "$BUILD/bench_train" --batch_sizes="$BATCHES" "${flags[@]}" \
      --json="$OUT/results.jsonl" >> "$OUT/bench_train.log" 2>&1
    status "bench_train $m rc=$?: $(grep -E 'img/s' "$OUT/bench_train.log" | tail -1 | cut -c1-100)"
  done
  status "bench_train in $(( $(date +%s) - t0 )) s"
  # CUDA graphs on (the default) and off for the launch-bound small nets (docs/OPERATIONS.md).
  t0=$(date +%s)
  for m in cifar10-18pct resnet18-cifar; do
    for g in on off; do
      timeout 120 "$BUILD/bench_train" --model=$m --batch_sizes=128 --cuda_graphs=$g \
        --breakdown=false --json="$OUT/results.jsonl" >> "$OUT/bench_train.log" 2>&1
    done
  done
  status "bench_train graphs on/off rc=$? in $(( $(date +%s) - t0 )) s"
fi

if [ -z "${SKIP_TRAINER:-}" ]; then
  # The whole trainer (data pipeline, pinned batch copies, metrics) on the same AlexNet
  # step: the gap to bench_train's img/s is the trainer's overhead. Synthetic data.
  t0=$(date +%s)
  timeout 120 "$BUILD/trainer" --model=alexnet --device=cuda --precision=fp32 --data=synthetic \
    --synthetic_size=4096 --batch_size=128 --steps=90 --log_every=30 --resume=none \
    > "$OUT/trainer.log" 2>&1
  rc=$?
  last=$(grep -E "^step" "$OUT/trainer.log" | tail -n 1)
  ips=$(echo "$last" | grep -oE "[0-9.]+ img/s" | grep -oE "^[0-9.]+")
  status "trainer rc=$rc in $(( $(date +%s) - t0 )) s: ${ips:-?} img/s, $(echo "$last" | grep -oE "data-wait [0-9]+%")"
  [ -n "$ips" ] && echo "{\"impl\": \"colonnade trainer\", \"batch\": 128, \"img_per_s\": $ips}" \
    >> "$OUT/results.jsonl"
  cat "$OUT/trainer.log" >> "$OUT/bench_train.log"; rm -f "$OUT/trainer.log"
fi

if [ -z "${SKIP_PEER:-}" ]; then
  t0=$(date +%s)
  PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" \
    --batch_sizes "$BATCHES" --modes "${PEER_MODES:-fp32,fp32_cl,tf32,bf16_compile}" \
    --json "$OUT/results.jsonl" > "$OUT/pytorch.log" 2>&1
  status "pytorch peer rc=$? in $(( $(date +%s) - t0 )) s"
fi

# ---- summary: the last thing printed ----
{
  echo
  echo "## summary ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), commit $COMMIT)"
  [ -f "$OUT/bench_layers.log" ] && grep -E "^ceilings|^cuDNN" "$OUT/bench_layers.log"
  python3 - "$OUT/layers.csv" "$OUT/results.jsonl" <<'PY'
import csv, json, math, os, sys
if os.path.exists(sys.argv[1]):
    print("| layer | batch | op | ours ms | ours TFLOP/s | cuDNN best ms | ours/cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for r in csv.DictReader(open(sys.argv[1])):
        c = [float(r[k]) for k in ("cudnn_nchw_ms", "cudnn_nhwc_ms") if r[k] not in ("nan", "")]
        c = [v for v in c if not math.isnan(v)]
        best = min(c) if c else float("nan")
        ours = float(r["ours_ms"])
        print(f"| {r['layer']} | {r['batch']} | {r['op']} | {ours:.3f} | {float(r['ours_tflops']):.1f} "
              f"| {best:.3f} | {ours / best:.2f} |")
print()
print("| impl | mode | batch | img/s | peak mem GiB |")
print("|---|---|---|---|---|")
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        try:
            r = json.loads(line)
        except Exception:
            continue
        if "error" in r:
            print(f"| {r['impl']} | {r.get('mode', '')} | {r['batch']} | error | |")
            continue
        mem = r.get("peak_in_use_bytes", r.get("max_memory_allocated", 0)) / 2**30
        mode = r.get("mode", "fp32") + (" wgmma" if r.get("wgmma") else "")
        print(f"| {r['impl']} | {mode} | {r['batch']} | {r['img_per_s']:.0f} | {mem:.2f} |")
PY
} >> "$OUT/summary.md" 2>&1
python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT" > /dev/null
cat "$OUT/summary.md"
