#!/usr/bin/env bash
# Recomputing batch-norm + ReLU outputs in the backward pass (--recompute=bn_relu,
# docs/MEMORY.md) never changes a result: trains the same short run with bn_relu and off
# and requires the same loss lines and a bitwise identical final checkpoint
# (checkpoint_diff with tolerance 0); --print_memory_plan shows the recompute steps and the
# recomputed buffers, and predicts a smaller arena than with --recompute=off.
#   recompute_same.sh TRAINER CHECKPOINT_DIFF [trainer flags...]
set -euo pipefail
trainer=$1; diff_tool=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for mode in bn_relu off; do
  "$trainer" --recompute=$mode --checkpoint_dir="$dir/$mode" --log_every=1 "$@" > "$dir/$mode.log"
  grep -E '^step ' "$dir/$mode.log" | sed -E 's/ +[0-9.]+ img\/s.*//' > "$dir/$mode.loss"
done
[ -s "$dir/bn_relu.loss" ] || { echo "FAIL: no step lines" >&2; exit 1; }
grep -qE 'memory plan on, [1-9][0-9]* recomputed' "$dir/bn_relu.log" ||
  { echo "FAIL: the banner names no recomputed blobs" >&2; exit 1; }
grep -q 'memory plan on, 0 recomputed' "$dir/off.log" ||
  { echo "FAIL: --recompute=off recomputed" >&2; exit 1; }
diff "$dir/bn_relu.loss" "$dir/off.loss" || { echo "FAIL: loss lines differ" >&2; exit 1; }
a=$(ls "$dir/bn_relu"/ckpt-*.h5 | tail -n 1); b=$(ls "$dir/off"/ckpt-*.h5 | tail -n 1)
"$diff_tool" --rtol=0 "$a" "$b" || { echo "FAIL: checkpoints differ" >&2; exit 1; }
for mode in bn_relu off; do
  "$trainer" --print_memory_plan --recompute=$mode "$@" > "$dir/plan_$mode.log"
done
grep -qE '^[^ ]+ \(recomputed\) +recomp .* R[0-9]+ ' "$dir/plan_bn_relu.log" ||
  { echo "FAIL: no recomputed buffer live from a recompute step" >&2; exit 1; }
if grep -q 'recomputed) ' "$dir/plan_off.log"; then echo "FAIL: recomputed with off" >&2; exit 1; fi
arena() { sed -nE 's/^activation\/gradient memory: ([0-9.]+) MiB planned.*/\1/p' "$1"; }
awk -v a="$(arena "$dir/plan_bn_relu.log")" -v b="$(arena "$dir/plan_off.log")" \
  'BEGIN { exit !(a + 0 > 0 && a + 0 < b + 0) }' ||
  { echo "FAIL: the arena did not shrink ($(arena "$dir/plan_bn_relu.log") vs $(arena "$dir/plan_off.log") MiB)" >&2; exit 1; }
echo ok
