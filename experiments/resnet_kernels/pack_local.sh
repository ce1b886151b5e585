#!/usr/bin/env bash
# Builds the GPU binaries on this machine and packs them for a device call, so that the call
# spends its time on the GPU suite and the timings instead of a build (about 120 s for the
# suite and three models' A/B on an H100, against 110 s of building both trees there first).
# BUILD: a build folder configured with the CUDA toolkit for sm_90a (default build/, which the
# README's set-up configures so where /usr/local/cuda exists); NAME (default new): the binary
# folder the device scripts know (stalls_gpu.sh: new, and base for TREES="base new").
# Writes .gpu_bin/pack/NAME.tar.xz holding NAME/{cuda_tests,bench_train} (bench_layers too
# with LAYERS=1, the trainer with TRAINER=1); carry .deps and .gpu_bin/pack. Builds here have
# no nvJPEG unless its headers are installed: the GPU JPEG decoder's three tests then skip on
# the device.
#   experiments/resnet_kernels/pack_local.sh [NAME] [BUILD]
#   TREES="base new" COMMIT_NEW=$(git rev-parse HEAD) COMMIT_BASE=... NO_PEER=1 MODELS= \
#     experiments/resnet_kernels/stalls_gpu.sh OUTDIR      # the device call
set -euo pipefail
NAME=${1:-new}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${2:-$ROOT/build}" && pwd)
# A CUDA build whose library compiles for sm_90a (the wgmma kernels).
flags=$BUILD/src/cuda/CMakeFiles/colonnade_cuda.dir/flags.make
grep -qE "(compute|sm)_90a" "$flags" 2>/dev/null ||
  { echo "pack_local.sh: $BUILD is not a CUDA build for sm_90a (no $flags naming 90a)" >&2; exit 2; }
targets=(cuda_tests bench_train)
[ -z "${LAYERS:-}" ] || targets+=(bench_layers)
[ -z "${TRAINER:-}" ] || targets+=(trainer)
cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$NAME" "$ROOT/.gpu_bin/pack"
for t in "${targets[@]}"; do
  f=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] || { echo "pack_local.sh: no $t under $BUILD" >&2; exit 1; }
  cp "$f" "$stage/$NAME/"
done
tar cf - -C "$stage" "$NAME" | xz -T2 -6 > "$ROOT/.gpu_bin/pack/$NAME.tar.xz"
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
echo "packed $ROOT/.gpu_bin/pack/$NAME.tar.xz ($(du -h "$ROOT/.gpu_bin/pack/$NAME.tar.xz" |
  cut -f1)) from $src at $(git -C "$src" rev-parse HEAD) (uncommitted changes: $(git -C "$src" status --short -uno | wc -l))"
