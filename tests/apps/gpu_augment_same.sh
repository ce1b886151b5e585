#!/usr/bin/env bash
# On a GPU, the GPU feed (--gpu_augment=on) trains exactly as the host path (off): after a
# few steps of a CUDA run with crops, padding, mirrors, lighting and the image mean, the
# parameters and momenta are bitwise equal (checkpoint_diff --rtol=0), for synthetic data
# (generated on the GPU) and for raw shards (uint8 copied, augmented on the GPU). Skips
# (exit 77) on a machine without a GPU, like the GPU GoogleTest suites.
#   gpu_augment_same.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
"$build/make_shards" --source=synthetic --output="$work/shards" --size=600 --test_size=10 \
  --height=40 --width=40 > "$work/ms.log" 2>&1 || { cat "$work/ms.log"; fail "make_shards"; }
RUN=(--model=cifar10-80sec --device=cuda --batch_size=33 --steps=6 --seed=5 --crop=32
     --pad=2 --mirror --lighting=0.1 --mean=image --log_every=3 --keep_checkpoints=1
     --resume=none)
for data in synthetic shards; do
  spec=$data; [ "$data" = shards ] && spec="$work/shards/train"
  extra=(); [ "$data" = synthetic ] && extra=(--synthetic_size=500 --input_size=32)
  for mode in on off; do
    "$build/trainer" "${RUN[@]}" "${extra[@]}" --data="$spec" --gpu_augment=$mode \
      --checkpoint_dir="$work/$data-$mode" > "$work/$data-$mode.log" 2>&1 ||
      { cat "$work/$data-$mode.log"; fail "$data --gpu_augment=$mode"; }
  done
  grep -q "feed       GPU" "$work/$data-on.log" || fail "$data: the banner does not show the GPU feed"
  grep -q "feed       GPU" "$work/$data-off.log" && fail "$data: --gpu_augment=off used the GPU feed"
  "$build/checkpoint_diff" "$work/$data-on/ckpt-000000006.h5" "$work/$data-off/ckpt-000000006.h5" \
    --rtol=0 || fail "$data: --gpu_augment=on and off trained differently"
done
echo "PASS: --gpu_augment=on equals off bitwise (synthetic, shards)"
