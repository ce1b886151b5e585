#!/usr/bin/env bash
# Unpacks CIFAR-10 (the JPEG image-folder tree in ../shared/data/cifar10-jpeg.tar.gz) and
# converts it to shard datasets for the trainer:
#
#   scripts/prepare_cifar10.sh OUTDIR      -> OUTDIR/train (50,000) and OUTDIR/test (10,000)
#
# Raw encoding (decoded 32x32x3 uint8); the test split stores the training mean image.
# Idempotent: if both datasets already exist it only says so (FORCE=1 rebuilds them).
# Environment: COLONNADE_SHARED_DATA (folder of the archive; default <repo>/../shared/data),
# MAKE_SHARDS (the binary; default <repo>/build/make_shards), THREADS (default: all cores).
# The data is never written inside the repository unless OUTDIR points there.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${COLONNADE_SHARED_DATA:-$ROOT/../shared/data}
ARCHIVE=$SHARED/cifar10-jpeg.tar.gz
MAKE_SHARDS=${MAKE_SHARDS:-$ROOT/build/make_shards}
THREADS=${THREADS:-0}

if [ ! -f "$ARCHIVE" ]; then
  echo "prepare_cifar10.sh: $ARCHIVE not found (set COLONNADE_SHARED_DATA)" >&2
  exit 1
fi
if [ ! -x "$MAKE_SHARDS" ]; then
  echo "prepare_cifar10.sh: $MAKE_SHARDS not found; build it (cmake --build build --target make_shards) or set MAKE_SHARDS" >&2
  exit 1
fi
FORCE_FLAG=()
if [ -f "$OUT/train/dataset.h5" ] && [ -f "$OUT/test/dataset.h5" ]; then
  if [ "${FORCE:-0}" != 1 ]; then
    echo "prepare_cifar10.sh: $OUT/train and $OUT/test already exist (FORCE=1 to rebuild)"
    exit 0
  fi
fi
[ "${FORCE:-0}" = 1 ] && FORCE_FLAG=(--force)

mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cifar10-jpeg.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "prepare_cifar10.sh: unpacking $ARCHIVE"
tar xzf "$ARCHIVE" -C "$TMP"
SRC=$TMP/cifar10-jpeg
start=$(date +%s.%N)
"$MAKE_SHARDS" --source=folder --input="$SRC/train" --output="$OUT/train" \
  --threads="$THREADS" "${FORCE_FLAG[@]}"
"$MAKE_SHARDS" --source=folder --input="$SRC/test" --output="$OUT/test" \
  --mean_from="$OUT/train" --threads="$THREADS" "${FORCE_FLAG[@]}"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v o="$OUT" \
  'BEGIN { printf "prepare_cifar10.sh: converted in %.1f s -> %s/train, %s/test\n", e - s, o, o }'
