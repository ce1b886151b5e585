#!/usr/bin/env bash
# Real CIFAR-10 from ../shared/data: convert the JPEG folder tree with make_shards, train
# cuda-convnet's 80sec network for one epoch on the CPU, and require a test error below
# 50%. Skips (77) when the archive is absent.
#   cifar10_one_epoch.sh BUILD_DIR
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${COLONNADE_SHARED_DATA:-$root/../shared/data}
# shellcheck source=../skip_policy.sh
. "$root/tests/skip_policy.sh"
[ -f "$shared/cifar10-jpeg.tar.gz" ] || skip_or_fail "$shared/cifar10-jpeg.tar.gz not found"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
MAKE_SHARDS="$build/make_shards" COLONNADE_SHARED_DATA="$shared" \
  "$root/scripts/prepare_cifar10.sh" "$work/cifar10"
"$build/trainer" --model=cifar10-80sec --device=cpu --data="$work/cifar10/train" \
  --val_data="$work/cifar10/test" --epochs=1 --log_every=50 --metrics_file="$work/m.jsonl"
err=$(grep '"kind":"eval"' "$work/m.jsonl" | tail -n 1 | sed 's/.*"top1_error":\([0-9.eE+-]*\).*/\1/')
echo "test error after one epoch: $err (must be below 0.5)"
awk -v e="$err" 'BEGIN { exit !(e < 0.5) }'
