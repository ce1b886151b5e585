#!/usr/bin/env bash
# On a GPU, --eval_views=10 cuts the ten crops on the device (the GPU feed, TenCropViewGpu)
# exactly as data::TenCrops does on the host (--gpu_augment=off): the predictions of a
# checkpoint (ln of the ten views' mean probabilities) are bitwise equal, and so are the eval
# lines, for raw shards (uint8 images copied) and synthetic data (generated on the device),
# the last batch partial. Skips (exit 77) on a machine without a GPU.
#   eval_views_gpu_same.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
# The predictions are compared with h5py: Debian's /usr/bin/python3 has it on the build
# machines, the first python3 on PATH on the GPU machine.
PY=""
for p in /usr/bin/python3 python3; do
  "$p" -c "import h5py, numpy" 2> /dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "SKIP: no python3 with h5py and numpy"; exit 77; }
"$build/make_shards" --source=synthetic --output="$work/shards" --size=200 --test_size=45 \
  --height=37 --width=37 > "$work/ms.log" 2>&1 || { cat "$work/ms.log"; fail "make_shards"; }
RUN=(--model=cifar10-80sec --device=cuda --batch_size=16 --crop=32 --seed=5)
"$build/trainer" "${RUN[@]}" --data="$work/shards/train" --steps=4 --checkpoint_dir="$work/ck" \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training"; }
ckpt="$work/ck/ckpt-000000004.h5"
for data in shards synthetic; do
  val="$work/shards/test"; [ "$data" = synthetic ] && val=synthetic
  extra=(); [ "$data" = synthetic ] && extra=(--synthetic_size=45 --input_size=37)
  for mode in on off; do
    "$build/trainer" "${RUN[@]}" "${extra[@]}" --mode=predict --val_data="$val" --resume="$ckpt" \
      --eval_views=10 --gpu_augment=$mode --predictions="$work/$data-$mode.h5" \
      > "$work/p-$data-$mode.log" 2>&1 || { cat "$work/p-$data-$mode.log"; fail "predict $data $mode"; }
    "$build/trainer" "${RUN[@]}" "${extra[@]}" --mode=eval --val_data="$val" --resume="$ckpt" \
      --eval_views=10 --gpu_augment=$mode 2>&1 | grep "10 views averaged" | sed 's/^eval [^ ]* //' \
      > "$work/e-$data-$mode.txt" || fail "eval $data $mode"
  done
  cmp -s "$work/e-$data-on.txt" "$work/e-$data-off.txt" ||
    fail "$data: eval lines differ: $(cat "$work/e-$data-on.txt") vs $(cat "$work/e-$data-off.txt")"
  "$PY" - "$work/$data-on.h5" "$work/$data-off.h5" <<'PY' || fail "$data: predictions differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
assert a.attrs["eval_views"] == 10 and b.attrs["eval_views"] == 10
la, lb = a["logits"][...], b["logits"][...]
assert la.shape == lb.shape and la.shape[0] == 45, (la.shape, lb.shape)
assert np.array_equal(la.view(np.uint32), lb.view(np.uint32)), np.abs(la - lb).max()
assert np.array_equal(a["labels"][...], b["labels"][...])
PY
  cat "$work/e-$data-on.txt"
done
echo "PASS: --eval_views=10 cut on the GPU equals the host's TenCrops bitwise (shards, synthetic)"
