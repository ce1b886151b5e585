#!/usr/bin/env bash
# On a GPU, bf16 activation storage (docs/PRECISION.md; on by default in bf16,
# --nobf16_activations turns it off): the banner says so, --print_memory_plan marks bf16 buffers and plans at most 0.6 of the float32 storage's
# bytes (0.50 measured for the ImageNet models), and cifar10-80sec trains on it: the loss
# falls as far as in plain bf16 (the last interval's loss at most 0.8 of the first; the
# same bar for both runs). Skips (exit 77) on a machine without a GPU.
#   gpu_bf16_activations.sh BUILD_DIR
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
RUN=(--model=cifar10-80sec --device=cuda --data=synthetic --synthetic_size=2048 --batch_size=64
     --precision=bf16 --resume=none)
planned() { grep -oE 'activation/gradient memory: [0-9.]+ MiB planned' "$1" | head -n 1 | grep -oE '[0-9.]+'; }
"$build/trainer" "${RUN[@]}" --nobf16_activations --print_memory_plan > "$work/plan_f32.txt" 2>&1 ||
  { cat "$work/plan_f32.txt"; fail "--print_memory_plan --nobf16_activations"; }
"$build/trainer" "${RUN[@]}" --print_memory_plan > "$work/plan_bf16.txt" 2>&1 ||
  { cat "$work/plan_bf16.txt"; fail "--print_memory_plan (bf16 storage by default)"; }
grep -q " bf16 " "$work/plan_bf16.txt" || fail "no bf16 buffer in the plan"
grep -q " bf16 " "$work/plan_f32.txt" && fail "bf16 buffers with --nobf16_activations"
a=$(planned "$work/plan_f32.txt"); b=$(planned "$work/plan_bf16.txt")
echo "planned: $a MiB float32, $b MiB bf16 storage"
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && b <= 0.6 * a) }' ||
  fail "bf16 storage plans $b MiB against $a MiB"
for mode in plain act; do
  flags=(); [ "$mode" = plain ] && flags=(--nobf16_activations)
  "$here/loss_falls.sh" 0.8 "$build/trainer" "${RUN[@]}" "${flags[@]}" --steps=96 --log_every=16 \
    --checkpoint_dir="$work/ckpt_$mode" > "$work/train_$mode.log" 2>&1 ||
    { cat "$work/train_$mode.log"; fail "training, $mode"; }
  grep "first interval loss" "$work/train_$mode.log"
done
grep -qE "device cuda \(bf16, bf16 activations[,)]" "$work/train_act.log" ||
  { grep layout "$work/train_act.log"; fail "the banner does not name bf16 activations"; }
grep -q "bf16 activations" "$work/train_plain.log" &&
  { grep layout "$work/train_plain.log"; fail "--nobf16_activations: the banner names them"; }
echo "PASS: bf16 activation storage plans half the bytes and trains"
