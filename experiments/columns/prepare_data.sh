#!/usr/bin/env bash
# Imagenette at 224x224 for the columns experiment (issue 16, experiments/columns/README.md):
# the largest class-balanced JPEG subset that fits BUDGET_MIB (default 52 MiB, so that with
# the source tree and the Abseil debs it fits the device machine's 64 MiB carry).
#
#   experiments/columns/prepare_data.sh [OUTDIR [MAKE_SHARDS]]
#
# OUTDIR (default .gpu_data/columns at the repo root) receives
#   val/    the first VAL_PER_CLASS (default 100) images of each class of Imagenette's own
#           val split (file-name order), storing the training split's mean image;
#   train/  the first N images of each class of Imagenette's train split (file-name order),
#           N the largest that keeps train + val within BUDGET_MIB.
# The source JPEGs (224x224, quality about 75) are stored byte for byte (make_shards
# --jpeg_passthrough; grayscale ones are re-encoded as RGB), so no second compression
# touches the colours. QUALITY=q re-encodes every image at quality q instead (q 50 fits
# about 20% more images; measured in README.md). MAKE_SHARDS defaults to build/make_shards.
# Other knobs: SRC (the archive), THREADS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/.gpu_data/columns}
MAKE_SHARDS=${2:-$ROOT/build/make_shards}
SRC=${SRC:-$ROOT/../shared/data/imagenette-224.tar.gz}
if [ ! -f "$SRC" ] && common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  SRC=$(dirname "$common")/../shared/data/imagenette-224.tar.gz  # from a linked worktree
fi
BUDGET_MIB=${BUDGET_MIB:-52}
VAL_PER_CLASS=${VAL_PER_CLASS:-100}
QUALITY=${QUALITY:-}
THREADS=${THREADS:-0}
[ -x "$MAKE_SHARDS" ] || { echo "prepare_data.sh: $MAKE_SHARDS not found: build it (cmake --build build --target make_shards) or pass its path" >&2; exit 2; }
[ -f "$SRC" ] || { echo "prepare_data.sh: $SRC not found (../shared/data, see its README.md); set SRC=" >&2; exit 2; }
budget=$(awk -v m="$BUDGET_MIB" 'BEGIN { printf "%d", m * 1048576 }')

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
tar xzf "$SRC" -C "$TMP"
IN=$TMP/imagenette-224
# File names are ImageNet ids (letters, digits, _ and .), so ls is safe here.
# shellcheck disable=SC2012
classes=$(cd "$IN/train" && ls | sort)

# subset SPLIT N DEST: the first N files (by name) of every class of SPLIT, hard-linked.
# shellcheck disable=SC2012
subset() {
  local split=$1 n=$2 dest=$3 c
  rm -rf "$dest"
  for c in $classes; do
    mkdir -p "$dest/$c"
    (cd "$IN/$split/$c" && ls | sort | head -n "$n" | while read -r f; do
       ln "$f" "$dest/$c/$f" 2>/dev/null || cp "$f" "$dest/$c/$f"; done)
  done
}
# sizes SPLIT: "class rank bytes" of every file, rank = its position by name in its class.
# shellcheck disable=SC2012
sizes() {
  local c
  for c in $classes; do
    (cd "$IN/$1/$c" && ls | sort | xargs stat -c %s | awk -v c="$c" '{ print c, NR, $1 }')
  done
}
sizes train >"$TMP/train.sizes"
sizes val >"$TMP/val.sizes"
# bytes of the first N files of every class of SPLIT
bytes_of() { awk -v n="$2" '$2 <= n { s += $3 } END { print s + 0 }' "$TMP/$1.sizes"; }

common=(--source=folder --encoding=jpeg --threads="$THREADS" --progress=false --strict --force)
[ -n "$QUALITY" ] && common+=(--jpeg_passthrough=false --jpeg_quality="$QUALITY")
mkdir -p "$OUT"
convert() {  # N_TRAIN: writes OUT/train and OUT/val, prints the total bytes
  subset train "$1" "$TMP/sub/train"
  subset val "$VAL_PER_CLASS" "$TMP/sub/val"
  "$MAKE_SHARDS" "${common[@]}" --input="$TMP/sub/train" --output="$OUT/train" >/dev/null
  # Converted on its own, the val split is told to store the training mean, which the
  # trainer's evaluation subtracts (it uses the val dataset's stored mean image).
  "$MAKE_SHARDS" "${common[@]}" --input="$TMP/sub/val" --output="$OUT/val" \
    --mean_from="$OUT/train" >/dev/null
  du -sb "$OUT" | cut -f1
}

# First guess from the source bytes (passthrough stores them), then shrink until it fits.
max_per_class=$(awk '{ if ($2 > m[$1]) m[$1] = $2 } END { for (c in m) print m[c] }' \
  "$TMP/train.sizes" | sort -n | head -n 1)
val_bytes=$(bytes_of val "$VAL_PER_CLASS")
# The largest N whose source bytes (which passthrough stores) fit 98% of the budget, less
# the two float32 mean images (224 x 224 x 3 x 4 bytes in each split's dataset.h5).
n=$(awk -v max="$max_per_class" -v room=$((budget * 98 / 100 - val_bytes - 2 * 602112)) '
  { b[$2] += $3 } END { s = 0; n = 0
    for (i = 1; i <= max; i++) { s += b[i]; if (s > room) break; n = i }
    print (n > 0 ? n : 1) }' "$TMP/train.sizes")
[ -n "$QUALITY" ] && n=$max_per_class  # re-encoded sizes are unknown: measure instead
while :; do
  total=$(convert "$n")
  [ "$total" -le "$budget" ] || [ "$n" -le 1 ] && break
  # Too big: drop the excess at this size's average bytes per image, plus 1%.
  per=$(( total / (n * $(echo "$classes" | wc -w) + VAL_PER_CLASS * $(echo "$classes" | wc -w)) ))
  cut=$(( (total - budget) / (per * $(echo "$classes" | wc -w)) + n / 100 + 1 ))
  n=$(( n - cut > 1 ? n - cut : 1 ))
done
[ "$total" -le "$budget" ] || { echo "prepare_data.sh: even 1 image per class is over ${BUDGET_MIB} MiB" >&2; exit 1; }
ntrain=$(/usr/bin/python3 -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$OUT/train/dataset.h5" 2>/dev/null || echo "?")
nval=$(/usr/bin/python3 -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$OUT/val/dataset.h5" 2>/dev/null || echo "?")
echo "prepare_data.sh: $n train images per class ($ntrain), $VAL_PER_CLASS val per class ($nval), 224x224 JPEG${QUALITY:+ at quality $QUALITY}: $(du -sb "$OUT/train" | cut -f1) bytes train + $(du -sb "$OUT/val" | cut -f1) bytes val = $total bytes ($(awk -v t="$total" 'BEGIN { printf "%.1f", t / 1048576 }') MiB, budget $BUDGET_MIB MiB) in $OUT"
