#!/usr/bin/env bash
# Recomputing activations in the backward pass (--recompute=bn_relu_add|bn_relu,
# docs/MEMORY.md) never changes a result: trains the same short run with each policy and
# with off and requires the same loss lines and a bitwise identical final checkpoint
# (checkpoint_diff with tolerance 0); --print_memory_plan shows the recompute steps and the
# recomputed buffers, and predicts a smaller arena than with --recompute=off.
#   recompute_same.sh TRAINER CHECKPOINT_DIFF [trainer flags...]
set -euo pipefail
trainer=$1; diff_tool=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
arena() { sed -nE 's/^activation\/gradient memory: ([0-9.]+) MiB planned.*/\1/p' "$1"; }
for mode in off bn_relu bn_relu_add; do
  "$trainer" --recompute=$mode --checkpoint_dir="$dir/$mode" --log_every=1 "$@" > "$dir/$mode.log"
  grep -E '^step ' "$dir/$mode.log" | sed -E 's/ +[0-9.]+ img\/s.*//' > "$dir/$mode.loss"
  "$trainer" --print_memory_plan --recompute=$mode "$@" > "$dir/plan_$mode.log"
done
[ -s "$dir/off.loss" ] || { echo "FAIL: no step lines" >&2; exit 1; }
grep -q 'memory plan on, 0 recomputed' "$dir/off.log" ||
  { echo "FAIL: --recompute=off recomputed" >&2; exit 1; }
if grep -q 'recomputed) ' "$dir/plan_off.log"; then echo "FAIL: recomputed with off" >&2; exit 1; fi
off=$(ls "$dir/off"/ckpt-*.h5 | tail -n 1)
for mode in bn_relu bn_relu_add; do
  grep -qE 'memory plan on, [1-9][0-9]* recomputed' "$dir/$mode.log" ||
    { echo "FAIL: $mode: the banner names no recomputed blobs" >&2; exit 1; }
  diff "$dir/$mode.loss" "$dir/off.loss" || { echo "FAIL: $mode: loss lines differ" >&2; exit 1; }
  "$diff_tool" --rtol=0 "$(ls "$dir/$mode"/ckpt-*.h5 | tail -n 1)" "$off" ||
    { echo "FAIL: $mode: checkpoints differ" >&2; exit 1; }
  grep -qE '^[^ ]+ \(recomputed\) +recomp .* R[0-9]+ ' "$dir/plan_$mode.log" ||
    { echo "FAIL: $mode: no recomputed buffer live from a recompute step" >&2; exit 1; }
  awk -v a="$(arena "$dir/plan_$mode.log")" -v b="$(arena "$dir/plan_off.log")" \
    'BEGIN { exit !(a + 0 > 0 && a + 0 < b + 0) }' ||
    { echo "FAIL: $mode: the arena did not shrink ($(arena "$dir/plan_$mode.log") vs $(arena "$dir/plan_off.log") MiB)" >&2; exit 1; }
done
echo ok
