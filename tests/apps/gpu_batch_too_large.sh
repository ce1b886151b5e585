#!/usr/bin/env bash
# On a GPU, a batch whose step cannot fit the device is refused before anything is
# allocated, with the sizes and the way out (exit 2), instead of the allocator aborting;
# bench_train skips such a batch size and measures the next. Skips (exit 77) without a GPU.
#   gpu_batch_too_large.sh BUILD_DIR
set -uo pipefail
build=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# ResNet-50 at 16,384 images needs about 900 GiB of activations and gradients.
"$build/trainer" --model=resnet50 --device=cuda --data=synthetic --synthetic_size=16384 \
  --batch_size=16384 --steps=1 --resume=none --checkpoint_dir="$work/ck" > "$work/t.log" 2>&1
rc=$?
cat "$work/t.log" | tail -3
[ $rc -eq 2 ] || fail "trainer exit $rc, want 2"
grep -q "need .* GiB at batch 16384 .* GiB available: lower the batch per replica" "$work/t.log" ||
  fail "no sizes and advice in the message"
if [ -x "$build/bench_train" ]; then
  "$build/bench_train" --model=resnet50 --batch_sizes=16384,8 --warmup=1 --steps=1 \
    > "$work/b.log" 2>&1 || { cat "$work/b.log"; fail "bench_train exit $?"; }
  grep -q "batch 16384: does not fit" "$work/b.log" || fail "bench_train did not report the batch"
  grep -q "batch 8: .* img/s" "$work/b.log" || { cat "$work/b.log"; fail "bench_train did not go on"; }
fi
echo "PASS: a batch too large for the GPU is refused with its sizes"
