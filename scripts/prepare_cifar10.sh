#!/usr/bin/env bash
# Unpacks CIFAR-10 (the JPEG image-folder tree in cifar10-jpeg.tar.gz) and converts it to
# shard datasets for the trainer:
#
#   scripts/prepare_cifar10.sh [--data_dir=DIR] OUTDIR
#       -> OUTDIR/train (50,000 images) and OUTDIR/test (10,000)
#
# --data_dir=DIR (or --data_dir DIR): the folder holding cifar10-jpeg.tar.gz; default
# $COLONNADE_SHARED_DATA when set, else ../shared/data beside the repository.
# Raw encoding (decoded 32x32x3 uint8) unless ENCODING=jpeg (the source JPEGs' bytes kept as
# they are: --jpeg_passthrough); the test split stores the training mean image.
# Idempotent: if both datasets already exist it only says so (FORCE=1 rebuilds them).
# Environment: MAKE_SHARDS (the binary; default <repo>/build/make_shards), THREADS
# (default: all cores), FORCE, ENCODING (raw or jpeg), COLONNADE_SHARED_DATA (see --data_dir).
# The data is never written inside the repository unless OUTDIR points there.
set -euo pipefail
usage() {
  cat <<EOF
usage: prepare_cifar10.sh [--data_dir=DIR] OUTDIR
  Converts DIR/cifar10-jpeg.tar.gz into the shard datasets OUTDIR/train and OUTDIR/test.
  --data_dir=DIR  the folder of cifar10-jpeg.tar.gz [\$COLONNADE_SHARED_DATA when set,
                  else ../shared/data beside the repository: $DEFAULT_SHARED]
  Environment: MAKE_SHARDS (the binary), THREADS (0: all cores), FORCE=1 (rebuild),
  ENCODING=raw (default) or jpeg (the source JPEGs kept as they are).
EOF
}
bad_usage() { echo "prepare_cifar10.sh: $*" >&2; usage >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEFAULT_SHARED=$(cd "$ROOT/.." && pwd)/shared/data
SHARED=${COLONNADE_SHARED_DATA:-$DEFAULT_SHARED}
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
  -h | --help) usage; exit 0 ;;
  --data_dir=*) SHARED=${1#--data_dir=} ;;
  --data_dir)
    [ $# -ge 2 ] || bad_usage "--data_dir needs a directory"
    SHARED=$2; shift ;;
  -*) bad_usage "unknown option $1" ;;
  *) [ -z "$OUT" ] || bad_usage "one OUTDIR only (got $OUT and $1)"
    OUT=$1 ;;
  esac
  shift
done
[ -n "$OUT" ] || bad_usage "no OUTDIR given"
[ -n "$SHARED" ] || bad_usage "--data_dir is empty"
ARCHIVE=$SHARED/cifar10-jpeg.tar.gz
MAKE_SHARDS=${MAKE_SHARDS:-$ROOT/build/make_shards}
THREADS=${THREADS:-0}

if [ ! -f "$ARCHIVE" ]; then
  echo "prepare_cifar10.sh: $ARCHIVE not found (--data_dir=DIR names the folder that holds it)" >&2
  exit 1
fi
if [ ! -x "$MAKE_SHARDS" ]; then
  echo "prepare_cifar10.sh: $MAKE_SHARDS not found; build it (cmake --build build --target make_shards) or set MAKE_SHARDS" >&2
  exit 1
fi
case ${ENCODING:-raw} in
raw) FLAGS=(--encoding=raw) ;;
jpeg) FLAGS=(--encoding=jpeg --jpeg_passthrough) ;;
*) bad_usage "ENCODING=${ENCODING} (raw or jpeg)" ;;
esac
if [ -f "$OUT/train/dataset.h5" ] && [ -f "$OUT/test/dataset.h5" ]; then
  if [ "${FORCE:-0}" != 1 ]; then
    echo "prepare_cifar10.sh: $OUT/train and $OUT/test already exist (FORCE=1 to rebuild)"
    exit 0
  fi
fi
[ "${FORCE:-0}" = 1 ] && FLAGS+=(--force)

mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cifar10-jpeg.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "prepare_cifar10.sh: unpacking $ARCHIVE"
tar xzf "$ARCHIVE" -C "$TMP"
SRC=$TMP/cifar10-jpeg
start=$(date +%s.%N)
"$MAKE_SHARDS" --source=folder --input="$SRC/train" --output="$OUT/train" \
  --threads="$THREADS" "${FLAGS[@]}"
"$MAKE_SHARDS" --source=folder --input="$SRC/test" --output="$OUT/test" \
  --mean_from="$OUT/train" --threads="$THREADS" "${FLAGS[@]}"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v o="$OUT" \
  'BEGIN { printf "prepare_cifar10.sh: converted in %.1f s -> %s/train, %s/test\n", e - s, o, o }'
