#!/usr/bin/env bash
# One command for the GPU machine that checks and times the tensor-core convolutions
# (src/cuda/conv/mma.cu and wgmma.cu; notes in src/cuda/TC_NOTES.md): build, the compiler's
# resource report and the SASS instruction mix per kernel (HMMA for mma.sync, HGMMA for
# wgmma), the tensor-core tests (every kernel, the wgmma ones included, against the CPU
# reference; the negative controls), compute-sanitizer on small cases, and bench_layers in
# bf16 and tf32 (each mma.sync and wgmma configuration timed) (ours vs cuDNN in the same math mode, per AlexNet
# layer, checked against our FP32 kernels). Logs go to OUTDIR; a short summary is printed last.
#
#   scripts/tc_check.sh OUTDIR
#
# Knobs: BUILD_DIR (default build-gpu), BATCHES (default 128,256), SANITIZE=0 to skip the
# sanitizer, SKIP_TESTS=1 (gpu_check.sh ran the whole suite), SKIP_BENCH=1, PRECISIONS (default bf16,tf32). Where /opt/absl/usr exists it is
# used as in gpu_check.sh.
set -uo pipefail
OUT=${1:?usage: tc_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
BATCHES=${BATCHES:-128,256}
PRECISIONS=${PRECISIONS:-bf16,tf32}
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
status() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.md" >&2; }
: > "$OUT/summary.md"

{ date -u; nvidia-smi || true; nvcc --version | tail -2; echo "commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"; } \
  > "$OUT/build.log" 2>&1
t0=$(date +%s)
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF "${PREFIX[@]}" >> "$OUT/build.log" 2>&1 ||
   ! cmake --build "$BUILD" -j16 --target colonnade_cuda cuda_tests bench_layers >> "$OUT/build.log" 2>&1; then
  status "build FAILED (see build.log)"; grep -E "error" "$OUT/build.log" | head -30; exit 1
fi
status "build ok in $(( $(date +%s) - t0 )) s"

# Resource report (registers, spills, shared memory) and SASS mix of every tensor-core kernel:
# a separate compile (about a minute of one core), so it runs beside the tests and is read
# at the end.
report() {
  local inc=()
  [ -d /opt/absl/usr/include ] && inc=(-I/opt/absl/usr/include)
  : > "$OUT/ptxas.log"
  for f in mma wgmma; do
    nvcc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -std=c++17 -DCOLONNADE_WITH_CUDA=1 \
      -I"$ROOT/src" "${inc[@]}" -c "$ROOT/src/cuda/conv/$f.cu" -o "$OUT/conv_$f.o" -Xptxas -v \
      >> "$OUT/ptxas.log" 2>&1
  done
  command -v cuobjdump > /dev/null || return 0
  cat <(cuobjdump --dump-sass "$OUT/conv_mma.o") <(cuobjdump --dump-sass "$OUT/conv_wgmma.o") \
    > "$OUT/sass.txt" 2>&1
  # HGMMA: the wgmma kernels (sm_90a); HMMA: mma.sync. A wgmma kernel without HGMMA, or
  # with LDL/STL, is on a slow path.
  awk '/Function :/ {f=$3} /HMMA/ {h[f]++} /HGMMA/ {g[f]++} /LDSM/ {l[f]++} /LDGSTS/ {c[f]++}
       /LDL|STL/ {s[f]++}
       END {for (k in h) m[k]=1; for (k in g) m[k]=1;
            for (k in m) printf "%5d HMMA %5d HGMMA %4d LDSM %4d LDGSTS %3d LDL/STL  %s\n",
                                h[k], g[k], l[k], c[k], s[k], k}' \
    "$OUT/sass.txt" | sort -k10 > "$OUT/sass_summary.txt"
  grep -oE 'H[G]?MMA\.[0-9A-Z.]+' "$OUT/sass.txt" | sort | uniq -c | tr '\n' ' ' > "$OUT/sass_forms.txt"
  rm -f "$OUT/sass.txt" "$OUT/conv_mma.o" "$OUT/conv_wgmma.o"
}
report &
REPORT_PID=$!
if [ -z "${SKIP_TESTS:-}" ]; then
t0=$(date +%s)
timeout 600 "$BUILD/tests/cuda/cuda_tests" --gtest_filter='*Tc*' > "$OUT/tc_tests.log" 2>&1
status "tensor-core tests rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tc_tests.log" | tr '\n' ' ')"
echo "largest rel err of a correct kernel: $(grep -oE 'rel err [0-9.e+-]+' "$OUT/tc_tests.log" |
  awk '{print $3}' | sort -g | tail -1)" >> "$OUT/summary.md"
fi

if [ "${SANITIZE:-1}" != 0 ] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --print-limit 10 "$BUILD/tests/cuda/cuda_tests" \
      --gtest_filter='*TcConvTest.*n1_c3_13x13*:*TcConvTest.*n8_c16_9x9*:*TcWgmmaTest.*n8_c16_9x9*' \
      > "$OUT/sanitizer_$tool.log" 2>&1
    status "compute-sanitizer $tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)"
  done
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  for p in ${PRECISIONS//,/ }; do
    t0=$(date +%s)
    timeout 400 "$BUILD/bench_layers" --precision="$p" --batch_sizes="$BATCHES" \
      --csv="$OUT/layers_$p.csv" > "$OUT/bench_layers_$p.log" 2>&1
    status "bench_layers --precision=$p rc=$? in $(( $(date +%s) - t0 )) s"
  done
fi

wait $REPORT_PID
status "ptxas: $(grep -c 'Used' "$OUT/ptxas.log") kernels, $(grep -cE '[1-9][0-9]* bytes spill stores' "$OUT/ptxas.log") with spills"
[ -f "$OUT/sass_summary.txt" ] &&
  status "SASS: $(wc -l < "$OUT/sass_summary.txt") tensor-core kernels, $(grep -c ' [1-9][0-9]* HGMMA' "$OUT/sass_summary.txt") with HGMMA; forms: $(cat "$OUT/sass_forms.txt")"
echo
cat "$OUT/summary.md"
[ -f "$OUT/sass_summary.txt" ] && head -70 "$OUT/sass_summary.txt"
for p in ${PRECISIONS//,/ }; do
  [ -f "$OUT/bench_layers_$p.log" ] && { echo "## $p"; grep -E "^ceilings|^cuDNN" "$OUT/bench_layers_$p.log";
    sed -n '/^| layer/,$p' "$OUT/bench_layers_$p.log"; }
done
