#!/usr/bin/env bash
# The memory plan changes where buffers live, never a result: trains the same short run
# with --memory_plan=on and =off and requires the same loss lines and a bitwise identical
# final checkpoint (checkpoint_diff with tolerance 0); then --print_memory_plan prints the
# plan and the predicted peak and exits 0 without training.
#   memory_plan_same.sh TRAINER CHECKPOINT_DIFF [trainer flags...]
set -euo pipefail
trainer=$1; diff_tool=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for plan in on off; do
  "$trainer" --memory_plan=$plan --checkpoint_dir="$dir/$plan" --log_every=1 "$@" > "$dir/$plan.log"
  grep -E '^step ' "$dir/$plan.log" | sed -E 's/ +[0-9.]+ img\/s.*//' > "$dir/$plan.loss"
done
grep -q 'memory plan on' "$dir/on.log" || { echo "FAIL: no memory line in the banner" >&2; exit 1; }
[ -s "$dir/on.loss" ] || { echo "FAIL: no step lines" >&2; exit 1; }
diff "$dir/on.loss" "$dir/off.loss" || { echo "FAIL: loss lines differ" >&2; exit 1; }
on=$(ls "$dir/on"/ckpt-*.h5 | tail -n 1); off=$(ls "$dir/off"/ckpt-*.h5 | tail -n 1)
"$diff_tool" --rtol=0 "$on" "$off" || { echo "FAIL: checkpoints differ" >&2; exit 1; }
"$trainer" --print_memory_plan "$@" > "$dir/plan.log"
grep -q 'predicted peak' "$dir/plan.log" || { echo "FAIL: no predicted peak" >&2; exit 1; }
grep -q '^d conv1 ' "$dir/plan.log" || { echo "FAIL: no gradient buffer rows" >&2; exit 1; }
if grep -q '^done:' "$dir/plan.log"; then echo "FAIL: --print_memory_plan trained" >&2; exit 1; fi
echo ok
