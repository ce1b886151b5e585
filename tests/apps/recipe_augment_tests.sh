#!/usr/bin/env bash
# The recipes' augmentation through the trainer on the CPU (docs/DATA.md §5). One case per call:
#   recipe_augment_tests.sh CASE BUILD_DIR
# Cases:
#   resume_bitwise  N steps straight == k steps, stop, resume, N - k steps, bitwise, with
#                   --random_resized_crop --cutout --mirror on 36x36 shards cropped to 32
#                   (a resumed run draws the same boxes and squares: they are keyed by
#                   (seed, epoch, position)), across an epoch; and the flags are not inert:
#                   the run without them ends elsewhere.
#   eval_resized    --mode=eval with --random_resized_crop evaluates the centre 32x32 of the
#                   36x36 images (fraction 0.875: round(31.5) = 32) unresized; with
#                   --eval_crop_fraction=0.75 (27 pixels resized to 32) the numbers change.
set -uo pipefail
case_name=$1; build=$2
T="$build/trainer"; DIFF="$build/checkpoint_diff"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$build/make_shards" --source=synthetic --output="$work/ds" --size=96 --test_size=40 --height=36 \
  --width=36 --progress=false > "$work/ms.log" 2>&1 || { cat "$work/ms.log"; fail "make_shards"; }
RUN=(--model=cifar10-80sec --data="$work/ds/train" --device=cpu --batch_size=32 --crop=32
     --log_every=1 --cpu_threads=2)
AUG=(--random_resized_crop --rrc_scale=0.25,1 --rrc_ratio=3/4,4/3 --cutout=8 --mirror)

case $case_name in
resume_bitwise)
  "$T" "${RUN[@]}" "${AUG[@]}" --steps=7 --checkpoint_dir="$work/a" > "$work/a.log" 2>&1 ||
    { cat "$work/a.log"; fail "straight run"; }
  grep -q "augment    train: random-resized crop (area 1/4,1, ratio 3/4,4/3) to 32x32, mirror, cutout 8" \
    "$work/a.log" || fail "the banner does not state the augmentation: $(grep augment "$work/a.log")"
  "$T" "${RUN[@]}" "${AUG[@]}" --steps=2 --checkpoint_dir="$work/b" > /dev/null 2>&1 ||
    fail "first part"
  "$T" "${RUN[@]}" "${AUG[@]}" --steps=7 --checkpoint_dir="$work/b" > "$work/b.log" 2>&1 ||
    { cat "$work/b.log"; fail "resume run"; }
  grep -q "^  resumed    from $work/b/ckpt-000000002.h5 at step 2 (epoch 0, position 64)$" \
    "$work/b.log" || fail "no resume at step 2: $(grep resumed "$work/b.log")"
  "$DIFF" "$work/a/ckpt-000000007.h5" "$work/b/ckpt-000000007.h5" || fail "not bitwise"
  "$T" "${RUN[@]}" --mirror --steps=7 --checkpoint_dir="$work/c" > /dev/null 2>&1 ||
    fail "run without the recipe's augmentation"
  if "$DIFF" "$work/a/ckpt-000000007.h5" "$work/c/ckpt-000000007.h5" > /dev/null 2>&1; then
    fail "--random_resized_crop --cutout changed nothing"
  fi
  echo "PASS: resumed bitwise with the random-resized crop and cutout (7 steps, 3 per epoch)"
  ;;
eval_resized)
  "$T" "${RUN[@]}" --steps=2 --checkpoint_dir="$work/a" > /dev/null 2>&1 || fail "training"
  ck="$work/a/ckpt-000000002.h5"
  line() {  # the eval line's numbers for the given flags
    "$T" "${RUN[@]}" --mode=eval --val_data="$work/ds/test" --resume="$ck" "$@" 2>&1 |
      grep -oE "loss [0-9.]+  top1-err [0-9.]+  top5-err [0-9.]+"
  }
  plain=$(line) || fail "eval"
  rrc=$(line --random_resized_crop) || fail "eval --random_resized_crop"
  resized=$(line --eval_crop_fraction=0.75) || fail "eval --eval_crop_fraction=0.75"
  [ "$plain" = "$rrc" ] || fail "fraction 0.875 of 36 is the 32x32 centre crop: '$plain' vs '$rrc'"
  [ "$plain" != "$resized" ] || fail "the resized centre square changed nothing: '$resized'"
  echo "PASS: centre crop '$plain'; resized from 27x27: '$resized'"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
