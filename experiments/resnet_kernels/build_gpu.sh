#!/usr/bin/env bash
# Builds this checkout on the device (sm_90a; Abseil from .deps as device_env.sh unpacks it)
# and copies cuda_tests, bench_train and bench_layers into .gpu_bin/NAME (default new), where
# run_gpu.sh (TREES, TEST_TREE) and layers_gpu.sh (VER) find binary folders. The build folder
# (build-gpu, ignored) stays on a warm machine, so a second call rebuilds only what changed.
# SRC: another source tree to build instead of this checkout (ab_gpu.sh's baseline); JOBS:
# compile jobs (default all cores).
#   experiments/resnet_kernels/build_gpu.sh OUTDIR [NAME]
set -uo pipefail
OUT=${1:?usage: build_gpu.sh OUTDIR [NAME]}
NAME=${2:-new}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
SRC=${SRC:-$ROOT}
{ cmake -S "$SRC" -B "$SRC/build-gpu" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF -DCMAKE_PREFIX_PATH=/opt/absl/usr &&
  cmake --build "$SRC/build-gpu" -j"${JOBS:-$(nproc)}" --target cuda_tests bench_train bench_layers; } \
  > "$OUT/build_$NAME.log" 2>&1
rc=$?
say "build $NAME rc=$rc in $(( $(date +%s) - t0 )) s"
if [ $rc -ne 0 ]; then grep -E "error" "$OUT/build_$NAME.log" | head -20 >&2; exit 1; fi
mkdir -p "$B/$NAME"
for t in tests/cuda/cuda_tests bench_train bench_layers; do
  f=$(find "$SRC/build-gpu" -type f -name "$(basename "$t")" -perm -u+x | head -1)
  cp "$f" "$B/$NAME/"
done
ls -la "$B/$NAME" >&2
