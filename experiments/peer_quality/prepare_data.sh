#!/usr/bin/env bash
# Imagenette as small JPEG shards for the peer comparison (issue 12, point 19):
#
#   experiments/peer_quality/prepare_data.sh [OUTDIR [MAKE_SHARDS]]
#
# OUTDIR (default .gpu_data/imagenette-small at the repo root) receives train/ (9,469 images)
# and val/ (3,925, storing the training split's mean image), every image resized to SIZE x SIZE
# (default 128; the source is 224x224, so --resize_exact keeps the whole picture) and
# re-encoded as JPEG at QUALITY (default 50), so that both splits fit the device machine's
# 64 MiB carry with the source tree (measured: README.md). MAKE_SHARDS defaults to
# build/make_shards. Knobs: SIZE, QUALITY, THREADS, SRC (the archive).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/.gpu_data/imagenette-small}
MAKE_SHARDS=${2:-$ROOT/build/make_shards}
# ../shared/data next to the checkout; from a linked git worktree, next to the main checkout.
SRC=${SRC:-$ROOT/../shared/data/imagenette-224.tar.gz}
if [ ! -f "$SRC" ] && common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  SRC=$(dirname "$common")/../shared/data/imagenette-224.tar.gz
fi
SIZE=${SIZE:-128}
QUALITY=${QUALITY:-50}
THREADS=${THREADS:-0}
[ -x "$MAKE_SHARDS" ] || { echo "prepare_data.sh: $MAKE_SHARDS not found: build it (cmake --build build --target make_shards) or pass its path" >&2; exit 2; }
[ -f "$SRC" ] || { echo "prepare_data.sh: $SRC not found (../shared/data, see its README.md); set SRC=" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
tar xzf "$SRC" -C "$TMP"
mkdir -p "$OUT"
common=(--source=folder --resize_exact="$SIZE" --encoding=jpeg --jpeg_quality="$QUALITY"
        --threads="$THREADS" --progress=false --strict --force)
"$MAKE_SHARDS" "${common[@]}" --input="$TMP/imagenette-224/train" --output="$OUT/train"
# The val split is converted on its own, so it is told to store the training mean
# (mean_source), which both trainers subtract (the trainer's eval pipeline uses the val
# dataset's stored mean image).
"$MAKE_SHARDS" "${common[@]}" --input="$TMP/imagenette-224/val" --output="$OUT/val" \
  --mean_from="$OUT/train"
echo "prepare_data.sh: $(du -sb "$OUT/train" | cut -f1) bytes train, $(du -sb "$OUT/val" | cut -f1) bytes val, $(du -sb "$OUT" | cut -f1) bytes in $OUT"
