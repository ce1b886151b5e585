#!/usr/bin/env bash
# Puts what experiments/recipes/run_gpu.sh needs on the GPU machine into the ignored paths
# the device call carries (experiments/recipes/README.md):
#
#   experiments/recipes/prepare_data.sh [MAKE_SHARDS]
#
#   .gpu_data/cifar10-jpeg.tar.gz   a copy of ../shared/data/cifar10-jpeg.tar.gz (19 MB; the
#                                   device converts it: make_shards, airbench_cache.py)
#   .gpu_data/imagenette-small/     Imagenette 128 px JPEG shards (37.6 MiB), made by
#                                   experiments/peer_quality/prepare_data.sh with MAKE_SHARDS
#                                   (default build-dev/make_shards, else build/make_shards)
#   .deps/libabsl*.deb              Abseil for the device build (copied from the main
#                                   checkout's .deps when missing here)
#   .deps/airbench/                 airbench94_muon.py from github.com/KellerJordan/
#                                   cifar10-airbench, with its LICENSE and COMMIT; third-party
#                                   code, never committed. Put it there by hand (see README)
#                                   or set AIRBENCH_GIT_DIR to a clone's git directory.
# Then prints the size of each carry list against the 64 MiB limit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MAKE_SHARDS=${1:-}
if [ -z "$MAKE_SHARDS" ]; then
  for m in "$ROOT/build-dev/make_shards" "$ROOT/build/make_shards"; do
    [ -x "$m" ] && { MAKE_SHARDS=$m; break; }
  done
fi
SHARED=${COLONNADE_SHARED_DATA:-$ROOT/../shared/data}
if [ ! -d "$SHARED" ] && common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  SHARED=$(dirname "$common")/../shared/data
fi
mkdir -p "$ROOT/.gpu_data" "$ROOT/.deps/airbench"

cp -u "$SHARED/cifar10-jpeg.tar.gz" "$ROOT/.gpu_data/cifar10-jpeg.tar.gz"
if [ ! -f "$ROOT/.gpu_data/imagenette-small/val/dataset.h5" ]; then
  [ -n "$MAKE_SHARDS" ] || { echo "prepare_data.sh: no make_shards: build it or pass its path" >&2; exit 2; }
  SRC=$SHARED/imagenette-224.tar.gz "$ROOT/experiments/peer_quality/prepare_data.sh" \
    "$ROOT/.gpu_data/imagenette-small" "$MAKE_SHARDS"
fi
if ! ls "$ROOT"/.deps/libabsl*.deb > /dev/null 2>&1; then
  main=$(dirname "$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir)")
  cp "$main"/.deps/libabsl*.deb "$ROOT/.deps/"
fi
if [ -n "${AIRBENCH_GIT_DIR:-}" ]; then
  git --git-dir="$AIRBENCH_GIT_DIR" show HEAD:airbench94_muon.py > "$ROOT/.deps/airbench/airbench94_muon.py"
  git --git-dir="$AIRBENCH_GIT_DIR" show HEAD:LICENSE > "$ROOT/.deps/airbench/LICENSE"
  git --git-dir="$AIRBENCH_GIT_DIR" rev-parse HEAD > "$ROOT/.deps/airbench/COMMIT"
fi
[ -f "$ROOT/.deps/airbench/airbench94_muon.py" ] ||
  echo "prepare_data.sh: WARNING: .deps/airbench/airbench94_muon.py missing (the cifar part then runs Colonnade only)" >&2

# What a device call copies: tracked files + untracked files git does not ignore + carry.
tree=$(cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
size() { du -sb "$@" | awk '{ s += $1 } END { print s }'; }
deps=$(size "$ROOT/.deps")
for part in cifar imagenette; do
  if [ $part = cifar ]; then data=$(size "$ROOT/.gpu_data/cifar10-jpeg.tar.gz")
  else data=$(size "$ROOT/.gpu_data/imagenette-small"); fi
  awk -v p=$part -v t="$tree" -v d="$deps" -v g="$data" 'BEGIN {
    s = t + d + g; printf "prepare_data.sh: %s call: tree %.1f + .deps %.1f + data %.1f = %.1f MiB of 64 %s\n",
      p, t / 2^20, d / 2^20, g / 2^20, s / 2^20, (s < 64 * 2^20 ? "(fits)" : "(TOO BIG)") }'
done
