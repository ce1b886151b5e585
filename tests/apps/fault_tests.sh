#!/usr/bin/env bash
# Trainer-level checkpoint, resume and fault tests (CPU backend). One case per call:
#   fault_tests.sh CASE BUILD_DIR
# Cases: resume_bitwise, resume_bitwise_mpi, resume_other_layout, signal_stop,
#        dead_rank, corrupt_checkpoint, mismatched_checkpoint, nan_loss, eval_predict,
#        rank_logs, changed_flags, predictions_no_clobber, metrics_file_no_clobber,
#        rank_log_write_error, stop_before_training, stop_at_start, rank_log_dir_refused,
#        num_classes_too_few, layout_error_quiet, resume_other_batch, eval_progress,
#        eval_from_checkpoint, resume_bitwise_options, resume_other_layout_options,
#        ema_checkpoints
set -uo pipefail
case_name=$1; build=$2
T="$build/trainer"; DIFF="$build/checkpoint_diff"
MPIRUN=(mpirun --oversubscribe -x COLONNADE_CPU_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d); trap 'pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# need_python_module NAME: true when /usr/bin/python3 imports NAME. In CI
# (COLONNADE_NO_SKIP=1), where setup.sh installs it, a missing module is a failure, not a
# reason to check less.
need_python_module() {
  /usr/bin/python3 -c "import $1" 2>/dev/null && return 0
  [ "${COLONNADE_NO_SKIP:-0}" = 1 ] && fail "python module $1 is missing (scripts/setup.sh installs it)"
  echo "note: /usr/bin/python3 has no $1; that part of the check is skipped" >&2
  return 1
}
CIFAR=(--model=cifar10-80sec --data=synthetic --device=cpu --batch_size=32 --synthetic_size=512
       --log_every=1 --cpu_threads=2)
# A small AlexNet keeps its two columns, so mp=2 is possible.
ALEX=(--model=alexnet --data=synthetic --device=cpu --batch_size=8 --input_size=67
      --num_classes=10 --synthetic_size=64 --log_every=1 --lr=0.001)
last_ckpt() { ls "$1"/ckpt-*.h5 2>/dev/null | sort | tail -n 1; }
# expect_resumed LOG CKPT STEP POSITION: the run logged in LOG resumed from CKPT at STEP
# with the data cursor at POSITION (images into the epoch), and its first logged step is
# STEP + 1 (runs here log every step): a run that silently restarted from step 0, or from
# another checkpoint, or with a reset cursor fails.
expect_resumed() {
  local log=$1 ckpt=$2 step=$3 pos=$4
  grep -q "^  resumed    from $ckpt at step $step (epoch [0-9]*, position $pos)$" "$log" ||
    fail "no resume from $ckpt at step $step, position $pos: $(grep resumed "$log")"
  local first
  first=$(grep -m1 -oE '^step +[0-9]+/' "$log" | grep -oE '[0-9]+')
  [ "$first" = $((step + 1)) ] || fail "first step after resuming at $step is '$first'"
}

case $case_name in
resume_bitwise)
  # N steps straight == k steps, stop, resume, N - k steps: bitwise on the CPU.
  "$T" "${CIFAR[@]}" --steps=8 --checkpoint_dir="$work/a" >/dev/null || fail "straight run"
  "$T" "${CIFAR[@]}" --steps=3 --checkpoint_dir="$work/b" >/dev/null || fail "first part"
  "$T" "${CIFAR[@]}" --steps=8 --checkpoint_dir="$work/b" > "$work/log" || fail "resume run"
  expect_resumed "$work/log" "$work/b/ckpt-000000003.h5" 3 96
  "$DIFF" "$work/a/ckpt-000000008.h5" "$work/b/ckpt-000000008.h5" || fail "not bitwise"
  ;;
resume_bitwise_options)
  # resume_bitwise with issue 35's options on: Nesterov, LARS, label smoothing and the weight
  # EMA (its shadow in the checkpoint, compared by checkpoint_diff). Only the interrupted
  # run evaluates (with the EMA, every 2 steps), so equality also shows that evaluation puts
  # the trained weights back.
  OPT=(--nesterov --optimizer=lars --lars_eta=0.02 --label_smoothing=0.1 --ema_decay=0.9
       --ema_every=2)
  EVAL=(--val_data=synthetic --eval_every=2)
  "$T" "${CIFAR[@]}" "${OPT[@]}" --steps=8 --checkpoint_dir="$work/a" >/dev/null || fail "straight run"
  "$T" "${CIFAR[@]}" "${OPT[@]}" "${EVAL[@]}" --steps=3 --checkpoint_dir="$work/b" >/dev/null \
    || fail "first part"
  "$T" "${CIFAR[@]}" "${OPT[@]}" "${EVAL[@]}" --steps=8 --checkpoint_dir="$work/b" > "$work/log" \
    || fail "resume run"
  expect_resumed "$work/log" "$work/b/ckpt-000000003.h5" 3 96
  grep -q "LARS lr .*Nesterov momentum" "$work/log" || fail "banner: no LARS/Nesterov"
  grep -q "(ema weights)" "$work/log" || fail "evaluation did not use the EMA"
  "$DIFF" "$work/a/ckpt-000000008.h5" "$work/b/ckpt-000000008.h5" || fail "not bitwise"
  ;;
resume_other_layout_options)
  # The EMA shadow reshards like the velocity: written by one rank, resumed as (2, 2).
  OPT=(--nesterov --label_smoothing=0.1 --ema_decay=0.5)
  "$T" "${ALEX[@]}" "${OPT[@]}" --steps=4 --checkpoint_dir="$work/a" >/dev/null || fail "straight run"
  "$T" "${ALEX[@]}" "${OPT[@]}" --steps=2 --checkpoint_dir="$work/b" >/dev/null || fail "first part"
  "${MPIRUN[@]}" -np 4 "$T" "${ALEX[@]}" "${OPT[@]}" --mp=2 --steps=4 \
    --checkpoint_dir="$work/b" > "$work/log" || fail "resume run"
  grep -q "dp 2 x mp 2" "$work/log" || fail "not a (2, 2) layout"
  "$DIFF" --rtol=1e-5 "$work/a/ckpt-000000004.h5" "$work/b/ckpt-000000004.h5" \
    || fail "layouts disagree"
  # LARS's norms are per rank: refused under a column split.
  "${MPIRUN[@]}" -np 2 "$T" "${ALEX[@]}" --mp=2 --optimizer=lars --steps=1 > "$work/lars" 2>&1
  [ $? = 2 ] && grep -q "optimizer=lars needs --mp=1" "$work/lars" || fail "lars with mp=2 not refused"
  ;;
ema_checkpoints)
  # A checkpoint without an EMA resumes with --ema_decay (the shadow restarts from its
  # weights); eval and predict use the shadow by default, the raw weights on request; asking
  # for the shadow of a checkpoint that has none is a usage error.
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "plain run"
  "$T" "${CIFAR[@]}" --steps=4 --ema_decay=0.5 --checkpoint_dir="$work/a" > "$work/log" \
    || fail "resume with --ema_decay"
  grep -q "the checkpoint had none: it restarts" "$work/log" || fail "no restart note"
  ck=$work/a/ckpt-000000004.h5
  E=(--mode=eval --device=cpu --val_data=synthetic --synthetic_size=512 --batch_size=32)
  "$T" "${E[@]}" --resume="$ck" > "$work/ema" 2>&1 || fail "eval (ema)"
  grep -q "evaluating with the checkpoint's moving-average weights" "$work/ema" || fail "eval ignored the EMA"
  "$T" "${E[@]}" --resume="$ck" --eval_weights=raw > "$work/raw" 2>&1 || fail "eval (raw)"
  grep -q "moving-average" "$work/raw" && fail "--eval_weights=raw used the EMA"
  [ "$(grep -o 'top1-err [0-9.]*' "$work/ema")" != "" ] || fail "no eval result"
  "$T" "${E[@]}" --resume="$work/a/ckpt-000000002.h5" --eval_weights=ema > "$work/none" 2>&1
  [ $? = 2 ] && grep -q "holds no moving average" "$work/none" || fail "--eval_weights=ema not refused"
  ;;
resume_bitwise_mpi)
  # The same under (dp, mp) = (2, 2): four ranks.
  "${MPIRUN[@]}" -np 4 "$T" "${ALEX[@]}" --mp=2 --steps=4 --checkpoint_dir="$work/a" \
    >/dev/null || fail "straight run"
  "${MPIRUN[@]}" -np 4 "$T" "${ALEX[@]}" --mp=2 --steps=2 --checkpoint_dir="$work/b" \
    >/dev/null || fail "first part"
  "${MPIRUN[@]}" -np 4 "$T" "${ALEX[@]}" --mp=2 --steps=4 --checkpoint_dir="$work/b" \
    > "$work/log" || fail "resume run"
  grep -q "dp 2 x mp 2" "$work/log" || fail "not a (2, 2) layout"
  expect_resumed "$work/log" "$work/b/ckpt-000000002.h5" 2 16
  "$DIFF" "$work/a/ckpt-000000004.h5" "$work/b/ckpt-000000004.h5" || fail "not bitwise"
  ;;
resume_other_layout)
  # Written by one rank, resumed as (dp, mp) = (2, 2): matches the one-rank run within
  # floating-point reduction order.
  "$T" "${ALEX[@]}" --steps=4 --checkpoint_dir="$work/a" >/dev/null || fail "straight run"
  "$T" "${ALEX[@]}" --steps=2 --checkpoint_dir="$work/b" >/dev/null || fail "first part"
  "${MPIRUN[@]}" -np 4 "$T" "${ALEX[@]}" --mp=2 --steps=4 --checkpoint_dir="$work/b" \
    > "$work/log" || fail "resume run"
  grep -q "dp 2 x mp 2" "$work/log" || fail "not a (2, 2) layout"
  expect_resumed "$work/log" "$work/b/ckpt-000000002.h5" 2 16
  "$DIFF" --rtol=1e-5 "$work/a/ckpt-000000004.h5" "$work/b/ckpt-000000004.h5" \
    || fail "layouts disagree"
  ;;
signal_stop)
  # SIGTERM mid-run: checkpoint of the agreed step, exit 75; the resumed run ends bitwise
  # where an uninterrupted one does.
  "$T" "${CIFAR[@]}" --steps=60 --checkpoint_dir="$work/a" >/dev/null || fail "straight run"
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=60 --checkpoint_dir="$work/b" \
    >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do grep -q "step      5/" "$work/log" && break; sleep 0.1; done
  # Signal the ranks (as srun or Slurm's batch signal does), not mpirun itself.
  ranks=$(pgrep -f -- "--checkpoint_dir=$work/b" | grep -vx "$pid")
  [ -n "$ranks" ] || fail "no trainer to signal"
  kill -TERM $ranks
  wait $pid; code=$?
  cat "$work/log" | tail -n 3
  [ "$code" = 75 ] || fail "exit code $code after SIGTERM, expected 75"
  grep -q "stopped by SIGTERM" "$work/log" || fail "no stop message"
  stopped=$(last_ckpt "$work/b")
  [ -n "$stopped" ] || fail "no checkpoint written on SIGTERM"
  at=$((10#$(basename "$stopped" .h5 | cut -d- -f2)))
  grep -q "checkpoint step $at -> $stopped" "$work/log" || fail "no checkpoint of the agreed step"
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=60 --checkpoint_dir="$work/b" > "$work/log2" \
    || fail "resume run"
  expect_resumed "$work/log2" "$stopped" "$at" $(( (at * 32) % 512 ))
  # Two data-parallel ranks sum gradients in another order than one rank: compare the
  # resumed run with an uninterrupted two-rank run, bitwise.
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=60 --checkpoint_dir="$work/c" >/dev/null \
    || fail "straight two-rank run"
  "$DIFF" "$work/c/ckpt-000000060.h5" "$work/b/ckpt-000000060.h5" || fail "not bitwise"
  ;;
dead_rank)
  # A rank killed mid-run ends the whole job promptly; the job then resumes from the last
  # checkpoint and completes.
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=400 --checkpoint_every=5 \
    --checkpoint_dir="$work/a" >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [ -n "$(last_ckpt "$work/a")" ] && break; sleep 0.1; done
  sleep 1
  victim=$(pgrep -f -- "--checkpoint_dir=$work/a" | grep -v "^$pid\$" | tail -n 1)
  [ -n "$victim" ] || fail "no rank found"
  kill -9 "$victim"
  start=$(date +%s)
  wait $pid; code=$?
  took=$(( $(date +%s) - start ))
  echo "job ended with code $code ${took}s after a rank was killed"
  # mpirun ends the job with the killed rank's status, 128 + SIGKILL, and says which rank.
  [ "$code" = 137 ] || fail "exit code $code after a rank was killed, expected 137: $(tail -n 5 "$work/log")"
  grep -q "exited on signal 9" "$work/log" || fail "no message naming the killed rank: $(tail -n 5 "$work/log")"
  [ "$took" -le 60 ] || fail "job took ${took}s to end after a rank died"
  # The last checkpoint survived the crash and is whole.
  "$DIFF" "$(last_ckpt "$work/a")" "$(last_ckpt "$work/a")" >/dev/null || fail "the newest checkpoint is not valid"
  newest=$(last_ckpt "$work/a")
  at=$((10#$(basename "$newest" .h5 | cut -d- -f2)))
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=$((at + 5)) --checkpoint_dir="$work/a" \
    --resume=auto > "$work/log2" || fail "the resumed job failed"
  expect_resumed "$work/log2" "$newest" "$at" $(( (at * 32) % 512 ))
  grep -q "^done: $((at + 5)) steps" "$work/log2" || fail "the resumed job did not finish"
  ;;
corrupt_checkpoint)
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  f=$(last_ckpt "$work/a")
  # A truncated file: a runtime failure (1) naming the file, one line.
  head -c 20000 "$f" > "$work/truncated.h5"
  out=$("$T" "${CIFAR[@]}" --steps=4 --resume="$work/truncated.h5" 2>&1); code=$?
  echo "$out" | tail -n 2
  [ "$code" = 1 ] || fail "exit $code for a truncated checkpoint, expected 1"
  echo "$out" | grep -q "^trainer: error: .*$work/truncated.h5.*" || fail "the error does not name the file"
  # A flipped byte inside a tensor's stored data (located with h5py, not guessed) is caught
  # by the Fletcher-32 checksums: exit 1, the file and the tensor named.
  cp "$f" "$work/flipped.h5"
  need_python_module h5py && {
    at=$(/usr/bin/python3 - "$f" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["params/conv2/weight"]
    c = d.id.get_chunk_info(0)
    print(c.byte_offset + c.size // 2)
PY
    ) || fail "cannot locate conv2/weight's data"
    printf '\xff' | dd of="$work/flipped.h5" bs=1 seek="$at" conv=notrunc 2>/dev/null
    cmp -s "$f" "$work/flipped.h5" && printf '\x00' | dd of="$work/flipped.h5" bs=1 seek="$at" conv=notrunc 2>/dev/null
    out=$("$T" "${CIFAR[@]}" --steps=4 --resume="$work/flipped.h5" 2>&1); code=$?
    echo "$out" | tail -n 2
    [ "$code" = 1 ] || fail "exit $code for a bit-flipped checkpoint, expected 1"
    echo "$out" | grep -q "^trainer: error: .*flipped.h5.*/params/conv2/weight.*corrupt" \
      || fail "the error does not name the file and the tensor"
  }
  # A missing --resume file is a path the user typed wrong: a usage error (2).
  out=$("$T" "${CIFAR[@]}" --steps=4 --resume="$work/no-such.h5" 2>&1); code=$?
  echo "$out" | tail -n 1
  [ "$code" = 2 ] || fail "exit $code for a missing --resume file, expected 2"
  echo "$out" | grep -q "no-such.h5" || fail "the error does not name the missing file"
  # --resume=auto skips a corrupt newest checkpoint with a warning and takes the previous.
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$work/a" >/dev/null || fail "run 2"
  newest=$(last_ckpt "$work/a")
  size=$(stat -c %s "$newest")
  printf '\xff' | dd of="$newest" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
  out=$("$T" "${CIFAR[@]}" --steps=6 --checkpoint_dir="$work/a" 2>&1) || fail "auto resume failed"
  echo "$out" | grep -E "warning|resumed"
  echo "$out" | grep -q "warning.*ckpt-000000004.h5" || fail "no warning about the corrupt file"
  echo "$out" | grep -q "resumed.*ckpt-000000002.h5" || fail "did not fall back to step 2"
  ;;
mismatched_checkpoint)
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  out=$("$T" "${CIFAR[@]}" --num_classes=7 --steps=4 --checkpoint_dir="$work/a" 2>&1); code=$?
  echo "$out" | tail -n 2
  [ "$code" = 1 ] || fail "exit $code for a checkpoint of another shape, expected 1"
  echo "$out" | grep -q "^trainer: error: .*ckpt-000000002.h5: /params/fc10/weight has shape (10, " \
    || fail "the error does not name the file and the tensor"
  out=$("$T" "${CIFAR[@]}" --model=cifar10-18pct --steps=4 --checkpoint_dir="$work/a" 2>&1); code=$?
  echo "$out" | tail -n 1
  [ "$code" = 1 ] || fail "exit $code for a checkpoint of another model, expected 1"
  echo "$out" | grep -q "^trainer: error: .*ckpt-000000002.h5.*model cifar10-80sec.*cifar10-18pct" \
    || fail "the error does not name both models"
  ;;
num_classes_too_few)
  # Shards of 10 classes and --num_classes=9 (training or validation data): a usage error at
  # start-up naming the flag and the dataset, not an abort in the first step.
  "$build/make_shards" --source=synthetic --output="$work/ds" --size=64 --test_size=32 \
    --progress=false >/dev/null || fail "make_shards"
  for args in "--data=$work/ds/train" "--val_data=$work/ds/test"; do
    out=$("$T" "${CIFAR[@]}" $args --num_classes=9 --steps=2 2>&1); code=$?
    echo "$out" | tail -n 1
    [ "$code" = 2 ] || fail "exit $code for $args --num_classes=9, expected 2"
    [ "$(echo "$out" | grep -c error)" = 1 ] || fail "not one error line: $out"
    echo "$out" | grep -q "^trainer: error: --num_classes=9 is fewer than the 10 classes of $work/ds/" \
      || fail "the error does not name --num_classes and the dataset: $out"
  done
  ;;
nan_loss)
  # A learning rate that makes training diverge: the trainer stops with a message and
  # every checkpoint left in the directory is valid and finite.
  out=$("$T" "${CIFAR[@]}" --lr=1e12 --steps=50 --checkpoint_every=1 \
        --checkpoint_dir="$work/a" 2>&1); code=$?
  echo "$out" | tail -n 3
  [ "$code" = 3 ] || fail "exit code $code, expected 3 (NaN loss)"
  echo "$out" | grep -Eq "^trainer: error: the loss became -?(nan|inf) at step [0-9]+ .*stopping without writing a checkpoint" \
    || fail "no one-line message about the non-finite loss"
  # Every checkpoint left behind loads and holds finite values only (checkpoint_diff
  # compares bits, so a NaN would equal itself there: read the values with h5py).
  ls "$work"/a/ckpt-*.h5 >/dev/null 2>&1 || fail "no checkpoint was kept"
  for f in "$work"/a/ckpt-*.h5; do
    "$DIFF" "$f" "$f" >/dev/null || fail "$f is not a valid checkpoint"
    need_python_module h5py || continue
    /usr/bin/python3 - "$f" <<'PY' || fail "$f holds non-finite values"
import sys, h5py, numpy as np
bad = []
with h5py.File(sys.argv[1], "r") as f:
    f.visititems(lambda name, d: bad.append(name) if isinstance(d, h5py.Dataset)
                 and d.dtype.kind == "f" and not np.isfinite(d[...]).all() else None)
sys.exit(f"non-finite: {bad}" if bad else 0)
PY
  done
  ;;
eval_predict)
  "$T" "${CIFAR[@]}" --steps=20 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  "$T" "${CIFAR[@]}" --mode=eval --val_data=synthetic --checkpoint_dir="$work/a" \
    | grep -E "eval .*top1-err" || fail "eval"
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --mode=predict --val_data=synthetic \
    --checkpoint_dir="$work/a" --predictions="$work/p.h5" | grep predict || fail "predict"
  [ -s "$work/p.h5" ] || fail "no predictions file"
  if need_python_module h5py; then
    /usr/bin/python3 - "$work/p.h5" <<'PY' || fail "predictions content"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
logits, labels = f["logits"][...], f["labels"][...]
assert logits.shape == (512, 10), logits.shape
assert labels.shape == (512,) and labels.min() >= 0 and labels.max() < 10
assert np.isfinite(logits).all()
print("predictions", logits.shape, "accuracy", float((logits.argmax(1) == labels).mean()))
PY
  fi
  ;;
rank_logs)
  # --rank_log_dir: every rank writes its own progress file.
  mkdir -p "$work/logs"
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=4 --log_every=2 --rank_log_dir="$work/logs" \
    >/dev/null || fail "run"
  for r in 00000 00001; do
    grep -q "step 4  rank $((10#$r))" "$work/logs/rank-$r.log" || fail "no progress in rank-$r.log"
  done
  cat "$work"/logs/*.log
  ;;
changed_flags)
  # Resuming with another command line: the banner names every flag that changes the
  # training (here --pad dropped, --mirror and --lr added, --steps extended, given as
  # "--lr 0.002" without "="), and none that only changes logging or files.
  "$T" "${CIFAR[@]}" --steps=2 --pad=4 --checkpoint_dir="$work/c" >/dev/null || fail "first part"
  out=$("$T" "${CIFAR[@]}" --steps=4 --mirror --lr 0.002 --log_every=2 \
        --checkpoint_dir="$work/c") || fail "resume"
  echo "$out" | grep "changed"
  line=$(echo "$out" | grep "^  changed    since the checkpoint: ") || fail "no changed-flags line"
  for want in "--lr: (default) -> 0.002" "--mirror: (default) -> true" "--pad: 4 -> (default)" \
              "--steps: 2 -> 4"; do
    [[ "$line" == *"$want"* ]] || fail "'$want' missing from: $line"
  done
  [[ "$line" != *log_every* && "$line" != *checkpoint_dir* ]] || fail "reports a harmless flag: $line"
  # The second run's command line again (only --log_every differs): no such line.
  "$T" "${CIFAR[@]}" --steps=4 --mirror --lr=0.002 --checkpoint_dir="$work/c" > "$work/again.txt" \
    || fail "second resume"
  grep -q "resumed" "$work/again.txt" || fail "did not resume"
  if grep "^  changed" "$work/again.txt"; then fail "a changed-flags line without changes"; fi
  # Abseil's negated boolean form.
  out=$("$T" "${CIFAR[@]}" --steps=4 --nomirror --lr=0.002 --checkpoint_dir="$work/c") \
    || fail "third resume"
  echo "$out" | grep -q "^  changed    since the checkpoint: --mirror: true -> false$" \
    || fail "--nomirror not reported: $(echo "$out" | grep changed)"
  ;;
predictions_no_clobber)
  # --predictions never replaces the checkpoint it read, a dataset's index or shard, or a
  # device (even with --overwrite); any existing file needs --overwrite; a predictions
  # file may be replaced with it; no temporary file is left behind.
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  ckpt=$(last_ckpt "$work/a")
  "$build/make_shards" --source=synthetic --output="$work/ds" --size=64 --test_size=0 \
    --progress=false >/dev/null || fail "make_shards"
  P=("$T" "${CIFAR[@]}" --mode=predict --val_data=synthetic --resume="$ckpt")
  for target in "$ckpt" "$work/ds/train/dataset.h5" "$work/ds/train/shard-00000.h5"; do
    sum=$(md5sum < "$target")
    for consent in "" --overwrite; do
      out=$("${P[@]}" --predictions="$target" $consent 2>&1); code=$?
      echo "$out" | tail -n 1
      [ "$code" = 2 ] || fail "exit $code for --predictions=$target ${consent:-alone}, expected 2"
      echo "$out" | tail -n 1 | grep -q "error: --predictions=$target" \
        || fail "the error does not name --predictions=$target"
      [ "$(md5sum < "$target")" = "$sum" ] || fail "$target was replaced (${consent:-no consent})"
    done
  done
  out=$("${P[@]}" --predictions=/dev/full --overwrite 2>&1); code=$?
  [ "$code" = 2 ] || fail "exit $code for --predictions=/dev/full"
  echo "$out" | grep -q "is not a regular file" || fail "no message for /dev/full: $out"
  ln -s "$ckpt" "$work/link.h5"
  "${P[@]}" --predictions="$work/link.h5" --overwrite >/dev/null 2>&1
  [ $? = 2 ] || fail "a symbolic link was written through"
  # ... also a link to a file that --overwrite could replace (the link itself is refused).
  echo "keep me too" > "$work/target.txt"
  ln -s "$work/target.txt" "$work/link.txt"
  out=$("${P[@]}" --predictions="$work/link.txt" --overwrite 2>&1); code=$?
  [ "$code" = 2 ] || fail "exit $code: a symbolic link to a text file was written through"
  echo "$out" | grep -q "is a symbolic link" || fail "the refusal does not say why: $out"
  grep -q "keep me too" "$work/target.txt" && [ -L "$work/link.txt" ] || fail "the link or its target changed"
  # A plain file: refused without consent, replaced with it.
  echo "keep me" > "$work/notes.txt"
  "${P[@]}" --predictions="$work/notes.txt" >/dev/null 2>&1
  [ $? = 2 ] || fail "an existing file was replaced without --overwrite"
  grep -q "keep me" "$work/notes.txt" || fail "notes.txt changed"
  "${P[@]}" --predictions="$work/notes.txt" --overwrite >/dev/null || fail "--overwrite refused"
  # An earlier predictions file: refused without consent, replaced with it.
  "${P[@]}" --predictions="$work/p.h5" >/dev/null || fail "first predictions"
  "${P[@]}" --predictions="$work/p.h5" >/dev/null 2>&1
  [ $? = 2 ] || fail "predictions replaced without --overwrite"
  "${P[@]}" --predictions="$work/p.h5" --overwrite >/dev/null || fail "predictions --overwrite"
  leftovers=$(find "$work" -name "*.tmp*")
  [ -z "$leftovers" ] || fail "temporary files left behind: $leftovers"
  ;;
metrics_file_no_clobber)
  # --metrics_file appends text: an HDF5 file (a checkpoint) is refused before training.
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  ckpt=$(last_ckpt "$work/a"); sum=$(md5sum < "$ckpt")
  out=$("$T" "${CIFAR[@]}" --steps=1 --metrics_file="$ckpt" 2>&1); code=$?
  echo "$out" | tail -n 1
  [ "$code" = 2 ] || fail "exit $code, expected 2"
  echo "$out" | grep -q "metrics_file=$ckpt is an HDF5 file" || fail "no message"
  [ "$(md5sum < "$ckpt")" = "$sum" ] || fail "the checkpoint was changed"
  ;;
rank_log_write_error)
  # A rank log that cannot be written stops the job (exit 1) instead of losing the lines.
  mkdir -p "$work/logs"
  # A device that fails every write, as /dev/full does (a symbolic link to it is refused up
  # front: rank logs are never written through links).
  mknod "$work/logs/rank-00001.log" c 1 7 || fail "cannot make a /dev/full node (mknod needs root)"
  out=$("${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=2 --rank_log_dir="$work/logs" 2>&1); code=$?
  echo "$out" | grep "error" | head -n 2
  [ "$code" = 1 ] || fail "exit $code, expected 1"
  echo "$out" | grep -q "error on rank 1: writing --rank_log_dir=$work/logs/rank-00001.log failed: No space" \
    || fail "no message naming the rank log"
  ;;
stop_before_training)
  # A trainer blocked before its first step (here: opening a --metrics_file FIFO that no
  # one reads) ends promptly on SIGTERM with exit 75 and a note, instead of ignoring it.
  mkfifo "$work/fifo"
  "$T" "${CIFAR[@]}" --steps=5 --metrics_file="$work/fifo" >"$work/log" 2>&1 &
  pid=$!
  sleep 3
  kill -0 "$pid" 2>/dev/null || fail "the trainer did not block: $(cat "$work/log")"
  grep -q "^step" "$work/log" && fail "the trainer started training"
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    fail "still running 10 s after SIGTERM"
  fi
  wait "$pid"; code=$?
  cat "$work/log"
  [ "$code" = 75 ] || fail "exit code $code after SIGTERM, expected 75"
  grep -q "trainer: stopped by SIGTERM before training started" "$work/log" || fail "no note"
  ;;
stop_at_start)
  # A stop signal at any moment of start-up (MPI_Init alone takes up to a second) ends the
  # trainer with 75 and the note. The delays count from the moment the process first
  # catches any signal (its SigCgt mask is no longer empty: main has begun, or MPI_Init has
  # installed its handlers), not from exec: before that the dynamic loader is still mapping
  # a hundred libraries, for 15 ms on an idle machine and far longer on a loaded one, and
  # nothing a program does can catch a signal there.
  for delay in 0 0.05 0.1 0.2 0.4 0.8; do
    "$T" "${CIFAR[@]}" --steps=100000 >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 2000); do
      mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
      [ -n "$mask" ] && [ "$mask" != 0000000000000000 ] && break
      sleep 0.005
    done
    sleep "$delay"
    kill -TERM "$pid"
    wait "$pid"; code=$?
    echo "delay $delay: exit $code: $(grep stopped "$work/log")"
    [ "$code" = 75 ] || fail "exit $code after SIGTERM $delay s into start-up, expected 75: $(cat "$work/log")"
    # Before the first step: the start-up note; after it (a fast machine), the stop line.
    grep -Eq "^(trainer: stopped by SIGTERM before training started \(nothing to save\); exit 75|stopped by SIGTERM after step [0-9]+ .*exit 75 so the job can be requeued)$" \
      "$work/log" || fail "no note after SIGTERM $delay s into start-up: $(cat "$work/log")"
  done
  ;;
rank_log_dir_refused)
  # A --rank_log_dir that cannot serve is refused before training, exit 2, one line, as a
  # bad --metrics_file is; a rank log that is a link (here to a checkpoint) is never
  # appended to.
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  ckpt=$(last_ckpt "$work/a"); sum=$(md5sum < "$ckpt")
  touch "$work/file"
  mkdir -p "$work/logs"
  ln -s "$ckpt" "$work/logs/rank-00001.log"
  for dir in "$work/missing" "$work/file" "$work/logs"; do
    out=$("${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=2 --rank_log_dir="$dir" 2>&1); code=$?
    echo "$out" | grep error
    [ "$code" = 2 ] || fail "exit $code for --rank_log_dir=$dir, expected 2"
    [ "$(echo "$out" | grep -c error)" = 1 ] || fail "not one error line: $out"
    if echo "$out" | grep -q "^step"; then fail "trained with --rank_log_dir=$dir"; fi
    if echo "$out" | grep -q "stopped by"; then fail "a 'stopped by' note after a usage error: $out"; fi
  done
  echo "$out" | grep -q "error: on rank 1: --rank_log_dir=$work/logs/rank-00001.log is a symbolic link" \
    || fail "the link is not named"
  [ "$(md5sum < "$ckpt")" = "$sum" ] || fail "the checkpoint behind the link changed"
  ;;
layout_error_quiet)
  # A usage error every rank detects (an --mp that does not divide the world): one error
  # line, exit 2, and no rank stopped by the launcher claims "exit 75" (requeue me).
  # The second kind (an mp group across two pretended nodes) is found after collectives,
  # so the ranks leave at slightly different times: the old trainer printed the note there
  # in about one run of eight on 2 cores.
  for run in 1 2 3 4 5 6; do
    for np in 2 4; do
      if [ "$np" = 2 ]; then
        out=$("${MPIRUN[@]}" -np "$np" "$T" "${ALEX[@]}" --mp=5 --steps=2 2>&1); code=$?
      else
        out=$(COLONNADE_TEST_RANKS_PER_NODE=1 "${MPIRUN[@]}" -x COLONNADE_TEST_RANKS_PER_NODE \
              -np "$np" "$T" "${ALEX[@]}" --mp=2 --steps=2 2>&1); code=$?
      fi
      echo "run $run, $np ranks: $(echo "$out" | grep -E "error|stopped")"
      [ "$code" = 2 ] || fail "exit $code with $np ranks, expected 2"
      [ "$(echo "$out" | grep -c "trainer: error")" = 1 ] || fail "not one error line: $out"
      if echo "$out" | grep -q "stopped by"; then fail "a 'stopped by' note after a usage error: $out"; fi
    done
  done
  ;;
resume_other_batch)
  # Resumed with another --batch_size: the progress line's epoch comes from the data cursor
  # (3 x 32 + 64 = 160 of 512 images after step 4: 0.31), not from the step count at the
  # new batch (4 / 8 = 0.50), and the last line says how many steps this run trained.
  "$T" "${CIFAR[@]}" --steps=3 --checkpoint_dir="$work/a" >/dev/null || fail "first part"
  "$T" "${CIFAR[@]}" --batch_size=64 --steps=5 --checkpoint_dir="$work/a" > "$work/log" \
    || fail "resume with --batch_size=64"
  grep "^step\|^done" "$work/log"
  grep -q "^step      4/5  epoch   0.31 " "$work/log" || fail "epoch after the resume is not the cursor's"
  grep -q "^done: 5 steps (2 trained in this run from step 3 in " "$work/log" \
    || fail "the last line does not say what this run trained"
  ;;
eval_progress)
  # Evaluation and prediction print progress lines (images, img/s, ETA), here after every
  # batch (--progress_secs=0), on rank 0 only.
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  out=$("${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --mode=eval --val_data=synthetic \
        --checkpoint_dir="$work/a" --progress_secs=0 2>&1) || fail "eval"
  echo "$out" | grep eval | head -n 3
  n=$(echo "$out" | grep -cE "^  eval [0-9,]+/512 images \([0-9]+%\)  [0-9.]+ img/s  ETA ")
  [ "$n" = 15 ] || fail "$n progress lines for 16 batches of 32 (the last one is the result), expected 15"
  out=$("$T" "${CIFAR[@]}" --mode=predict --val_data=synthetic --checkpoint_dir="$work/a" \
        --predictions="$work/p.h5" --progress_secs=0 2>&1) || fail "predict"
  echo "$out" | grep -qE "^  predict 32/512 images \(6%\)" || fail "no predict progress: $out"
  ;;
eval_from_checkpoint)
  # --mode=eval|predict take the model, input size, classes and columns from the checkpoint:
  # a small AlexNet (67 px, 10 classes, 2 columns) evaluates with none of them repeated; a
  # flag given with another value is a usage error naming it.
  "$T" "${ALEX[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  E=("$T" --mode=eval --val_data=synthetic --synthetic_size=64 --device=cpu --cpu_threads=2)
  out=$("${E[@]}" --checkpoint_dir="$work/a" 2>&1) || fail "eval without the model flags: $out"
  echo "$out" | tail -n 1
  echo "$out" | grep -q "^eval $work/a/ckpt-000000002.h5 on synthetic:test: 64 images" || fail "no eval line"
  "${MPIRUN[@]}" -np 2 "${E[@]}" --resume="$work/a/ckpt-000000002.h5" --mp=2 >/dev/null \
    || fail "eval on the checkpoint's two columns (mp=2)"
  for bad in --input_size=224 --model=resnet50 --num_classes=1000 --columns=1 --crop=32; do
    out=$("${E[@]}" --checkpoint_dir="$work/a" "$bad" 2>&1); code=$?
    echo "$out" | tail -n 1
    [ "$code" = 2 ] || fail "exit $code with $bad, expected 2"
    flag=${bad%%=*}
    echo "$out" | grep -q "^trainer: error: $bad differs from the .* of $work/a/ckpt-000000002.h5 (.*), which --mode=eval uses: leave $flag out" \
      || fail "the error does not name $flag: $out"
  done
  # The same values as the checkpoint's are fine.
  "${E[@]}" --checkpoint_dir="$work/a" --model=alexnet --input_size=67 --num_classes=10 >/dev/null \
    || fail "eval with the checkpoint's own values"
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
