#!/usr/bin/env bash
# The trainer's step loop (CPU backend): a step's loss and probabilities are read back one
# step later, or at once when a progress line, checkpoint or evaluation needs them, and
# --profile_steps times steps phase by phase. Neither may change what is trained.
#   step_loop_tests.sh CASE BUILD_DIR
# Cases: sparse_logging, profile_steps, nan_between_logs, host_cache
set -uo pipefail
case_name=$1; build=$2
T="$build/trainer"; DIFF="$build/checkpoint_diff"
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
CIFAR=(--model=cifar10-80sec --data=synthetic --device=cpu --batch_size=32 --synthetic_size=512
       --cpu_threads=2)

case $case_name in
sparse_logging)
  # Read back every step (--log_every=1) or every 7th: the same model bit for bit, and the
  # progress line at step 14 averages the same 7 steps' losses in both runs.
  "$T" "${CIFAR[@]}" --steps=14 --log_every=1 --checkpoint_dir="$work/a" > "$work/a.log" ||
    fail "run logging every step"
  "$T" "${CIFAR[@]}" --steps=14 --log_every=7 --checkpoint_dir="$work/b" > "$work/b.log" ||
    fail "run logging every 7 steps"
  "$DIFF" "$work/a/ckpt-000000014.h5" "$work/b/ckpt-000000014.h5" || fail "not bitwise"
  grep -c '^step ' "$work/b.log" | grep -qx 2 || fail "expected 2 progress lines: $(cat "$work/b.log")"
  final_a=$(grep '^done:' "$work/a.log"); final_b=$(grep '^done:' "$work/b.log")
  # "done: 14 steps in Xs, loss A -> B": first and last step losses are equal.
  [ "${final_a#*,}" = "${final_b#*,}" ] || fail "final losses differ: '$final_a' vs '$final_b'"
  /usr/bin/python3 - "$work/a.log" "$work/b.log" <<'PY' || fail "progress losses differ"
import re, sys
def losses(path):
    return {int(m[1]): float(m[2]) for m in re.finditer(r"^step +(\d+)/\d+ .*? loss ([0-9.]+)",
                                                        open(path).read(), re.M)}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for step in (7, 14):  # b's line = mean of a's 7 lines (each the mean of one step)
    mean = sum(a[s] for s in range(step - 6, step + 1)) / 7
    assert abs(mean - b[step]) < 2e-4, (step, mean, b[step])
print("progress lines agree:", b)
PY
  ;;
profile_steps)
  # The table names every phase, counts the steps asked for, and the run trains exactly
  # as without profiling.
  "$T" "${CIFAR[@]}" --steps=9 --log_every=3 --checkpoint_dir="$work/a" > "$work/a.log" ||
    fail "plain run"
  "$T" "${CIFAR[@]}" --steps=9 --log_every=3 --profile_steps=4 --checkpoint_dir="$work/b" \
    > "$work/b.log" || fail "profiled run"
  cat "$work/b.log"
  grep -q "^profile of steps 3\.\.6 (4 steps" "$work/b.log" || fail "no profile header for steps 3..6"
  for phase in "batch to device" forward backward "gradient sync wait" optimizer results \
               "device step" "batch wait" "wall step"; do
    grep -Eq "^  $phase +[0-9]+\.[0-9]+" "$work/b.log" || fail "phase '$phase' missing"
  done
  fwd=$(grep -E '^  forward ' "$work/b.log" | awk '{print $2}')
  awk "BEGIN{exit !($fwd > 0)}" || fail "forward took no time: $fwd"
  "$DIFF" "$work/a/ckpt-000000009.h5" "$work/b/ckpt-000000009.h5" || fail "profiling changed the run"
  # Longer than the run: no table, no error.
  "$T" "${CIFAR[@]}" --steps=3 --profile_steps=10 > "$work/c.log" || fail "short run"
  ! grep -q "^profile of" "$work/c.log" || fail "a table for steps that never ran"
  ;;
nan_between_logs)
  # A loss that turns non-finite between two progress lines is still named at its own
  # step (the device totals keep the first non-finite step until they are read), and
  # nothing is checkpointed after it.
  out=$("$T" "${CIFAR[@]}" --lr=1e12 --steps=50 --log_every=25 --checkpoint_every=25 \
        --checkpoint_dir="$work/a" 2>&1); code=$?
  echo "$out" | tail -n 3
  [ "$code" = 3 ] || fail "exit code $code, expected 3"
  step=$(echo "$out" | grep -oE "the loss became -?(nan|inf) at step [0-9]+" | grep -oE '[0-9]+$') ||
    fail "no message about the non-finite loss"
  # The same divergence logged every step: the first non-finite step is the same one.
  out1=$("$T" "${CIFAR[@]}" --lr=1e12 --steps=50 --log_every=1 2>&1)
  step1=$(echo "$out1" | grep -oE "the loss became -?(nan|inf) at step [0-9]+" | grep -oE '[0-9]+$')
  [ "$step" = "$step1" ] || fail "caught at step $step, but logging every step says $step1"
  [ "$step" -lt 25 ] || fail "diverged only at step $step: the case needs an earlier one"
  ! ls "$work"/a/ckpt-*.h5 >/dev/null 2>&1 || fail "a checkpoint was written: $(ls "$work/a")"
  ;;
host_cache)
  # The banner says how much of the shard data is held in memory (read without the HDF5
  # lock), and says nothing when the budget is 0; training is the same either way.
  "$build/make_shards" --source=synthetic --output="$work/shards" --size=300 --test_size=10 \
    > "$work/ms.log" 2>&1 || { cat "$work/ms.log"; fail "make_shards"; }
  "$T" "${CIFAR[@]/--data=synthetic/--data=$work/shards/train}" --steps=3 \
    --checkpoint_dir="$work/a" > "$work/a.log" || fail "run with the cache"
  grep -E "^  host cache 0\.9 MiB of shard images in memory" "$work/a.log" ||
    fail "no host cache line for 300 images of 32x32x3: $(grep -A1 '^  data' "$work/a.log")"
  COLONNADE_SHARD_CACHE_MB=0 "$T" "${CIFAR[@]/--data=synthetic/--data=$work/shards/train}" \
    --steps=3 --checkpoint_dir="$work/b" > "$work/b.log" || fail "run without the cache"
  ! grep -q "host cache" "$work/b.log" || fail "a host cache line with the budget at 0"
  "$DIFF" "$work/a/ckpt-000000003.h5" "$work/b/ckpt-000000003.h5" || fail "the cache changed the run"
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "PASS $case_name"
