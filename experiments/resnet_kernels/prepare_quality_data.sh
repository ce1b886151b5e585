#!/usr/bin/env bash
# The data and the trainer that quality_gpu.sh carries to the device, made on this machine
# from ../shared/data (about a minute; every path is git-ignored under .gpu_data/):
#   .gpu_data/inet/{train,val}           AlexNet's Imagenette subset (experiments/alexnet_init):
#                                        the first 350 training and 120 validation images of
#                                        each class in file-name order, JPEG shards, val with
#                                        the training mean (50 MB)
#   .gpu_data/q/cif_shards.tar.gz        CIFAR-10 JPEG shards (scripts/prepare_cifar10.sh, ENCODING=jpeg),
#                                        test with the training mean (19 MB)
#   .gpu_data/imagenette-small           experiments/peer_quality/prepare_data.sh (128 px, q50)
#   .gpu_data/qbin/qbin.tar.xz           BUILD's trainer (a CUDA build for sm_90a; 11 MB)
# Which part fits which call (64 MiB with the tracked tree): quality_gpu.sh's header.
#   experiments/resnet_kernels/prepare_quality_data.sh [BUILD]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
MS=$BUILD/make_shards
SRC=$ROOT/../shared/data
G=$ROOT/.gpu_data
[ -x "$MS" ] || { echo "prepare_quality_data.sh: no $MS (cmake --build $BUILD --target make_shards trainer)" >&2; exit 2; }
for f in imagenette-224.tar.gz cifar10-jpeg.tar.gz; do
  [ -f "$SRC/$f" ] || { echo "prepare_quality_data.sh: no $SRC/$f (../shared/data, see its README.md)" >&2; exit 2; }
done
cmake --build "$BUILD" --target trainer make_shards
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
tar xzf "$SRC/imagenette-224.tar.gz" -C "$W"
common=(--source=folder --encoding=jpeg --progress=false --force)

# The AlexNet subset: links to the first N files of each class folder.
for split in train:350 val:120; do
  s=${split%:*} n=${split#*:}
  for class in "$W/imagenette-224/$s"/*/; do
    c=$(basename "$class")
    mkdir -p "$W/sub/$s/$c"
    find "$class" -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | sed -n "1,${n}p" |
      while read -r f; do ln -s "$class$f" "$W/sub/$s/$c/$f"; done
  done
done
"$MS" "${common[@]}" --input="$W/sub/train" --output="$G/inet/train"
"$MS" "${common[@]}" --input="$W/sub/val" --output="$G/inet/val" --mean_from="$G/inet/train"

mkdir -p "$G/q"
ENCODING=jpeg MAKE_SHARDS=$MS "$ROOT/scripts/prepare_cifar10.sh" --data_dir="$SRC" "$W/cif/cif_shards"
tar czf "$G/q/cif_shards.tar.gz" -C "$W/cif" cif_shards

"$ROOT/experiments/peer_quality/prepare_data.sh" "$G/imagenette-small" "$MS"

mkdir -p "$W/pack/qbin" "$G/qbin"
cp "$BUILD/trainer" "$W/pack/qbin/"
tar cf - -C "$W/pack" qbin | xz -T2 -6 > "$G/qbin/qbin.tar.xz"
du -sh "$G/inet" "$G/q" "$G/imagenette-small" "$G/qbin"
