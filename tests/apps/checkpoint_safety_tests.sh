#!/usr/bin/env bash
# What a second job or a bad file must not do to the trainer's checkpoints (CPU backend).
# One case per call:   checkpoint_safety_tests.sh CASE BUILD_DIR
#   concurrent_jobs  two trainers on one --checkpoint_dir: the second waits for the first's
#                    lock, then resumes where it ended; neither dies, nothing is lost
#   lock_timeout     the lock stays taken: exit 4 naming the directory and the holder's
#                    pid (one rank and two); a stop signal ends the wait (exit 75)
#   resume_none      --resume=none over existing checkpoints: refused (exit 2), files kept
#   crafted_shapes   checkpoints whose shapes overflow or claim more than the file holds:
#                    one-line errors (trainer exit 1, checkpoint_diff exit 2), little
#                    memory, and --resume=auto skips them like any corrupt checkpoint
#   weights_only     resuming a checkpoint without optimizer state says so in the banner
#   beyond_steps     a checkpoint at --steps: nothing to train (exit 0); beyond: exit 2
#   hdf5_one_line    corrupt checkpoints and shards, an uncreatable --predictions file:
#                    our one line on stderr, never HDF5's error stack
#   lock_file        a ckpt.lock that is a symbolic link, a hard link or not a lock file:
#                    refused (exit 2) naming it, the file behind it untouched
#   bad_attributes   root attributes out of range (num_classes=0, columns=0): corrupt
#                    (exit 1; checkpoint_diff exit 2); another input_size: a mismatch
#                    naming --input_size; checkpoint_diff reports differing attributes
#   corrupt_cursor   a cursor beyond the training data: --resume=PATH exit 1, and
#                    --resume=auto skips the file with a warning and resumes the one before
# Crafted files are made here with h5py (/usr/bin/python3); without it those cases exit 77.
set -uo pipefail
case_name=$1; build=$2
T="$build/trainer"; DIFF="$build/checkpoint_diff"; PY=/usr/bin/python3
MPIRUN=(mpirun --oversubscribe -x COLONNADE_CPU_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
need_h5py() { "$PY" -c "import h5py" 2>/dev/null || { echo "skip: $PY has no h5py"; exit 77; }; }
CIFAR=(--model=cifar10-80sec --data=synthetic --device=cpu --batch_size=32 --synthetic_size=512
       --log_every=1 --cpu_threads=1)
# Waits up to 60 s for a file to contain a pattern.
wait_for() {
  for _ in $(seq 1 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# Exactly one line on stderr (file $1), matching every further argument.
one_line() {
  local f=$1; shift
  [ "$(wc -l < "$f")" = 1 ] || fail "expected one line on stderr, got: $(cat "$f")"
  for want in "$@"; do grep -q -- "$want" "$f" || fail "'$want' not in: $(cat "$f")"; done
}

case $case_name in
concurrent_jobs)
  # Job B starts while job A writes a checkpoint every step into the same directory (as a
  # requeued job may while the old one still runs). Before the lock, each write's clean-up
  # unlinked every ckpt-*.tmp, including the other job's write in progress, and one job
  # died (3 of 3 trials).
  for trial in 1 2 3; do
    d="$work/d$trial"
    "$T" "${CIFAR[@]}" --steps=30 --checkpoint_every=1 --keep_checkpoints=2 \
      --checkpoint_dir="$d" >"$work/a.log" 2>&1 &
    a=$!; pids+=("$a")
    for _ in $(seq 1 600); do ls "$d"/ckpt-*.h5 >/dev/null 2>&1 && break; sleep 0.1; done
    "$T" "${CIFAR[@]}" --steps=60 --checkpoint_every=1 --keep_checkpoints=2 \
      --checkpoint_dir="$d" >"$work/b.log" 2>&1 &
    b=$!; pids+=("$b")
    wait "$a"; ca=$?; wait "$b"; cb=$?
    echo "trial $trial: job A exit $ca, job B exit $cb"
    grep -h -E "error|warning|waiting|resumed|done" "$work/a.log" "$work/b.log"
    [ "$ca" = 0 ] && [ "$cb" = 0 ] || fail "a job died (exit $ca, $cb)"
    grep -q "done: 30 steps" "$work/a.log" || fail "job A did not finish"
    # B waited for A's lock (it says so when it finds it taken) and so starts from A's end.
    grep -q "resumed    from $d/ckpt-000000030.h5 at step 30" "$work/b.log" \
      || fail "job B did not continue from job A's last checkpoint"
    for s in 59 60; do
      "$DIFF" "$d/ckpt-0000000$s.h5" "$d/ckpt-0000000$s.h5" >/dev/null \
        || fail "ckpt $s missing or invalid"
    done
    if ls "$d"/*.tmp 2>/dev/null; then fail "temporaries left behind"; fi
  done
  ;;
lock_timeout)
  d="$work/d"
  for bad in nan -1 1e9; do
    "$T" "${CIFAR[@]}" --steps=1 --checkpoint_lock_wait_s=$bad >/dev/null 2>"$work/err"; code=$?
    [ "$code" = 2 ] || fail "--checkpoint_lock_wait_s=$bad: exit $code, expected 2"
    one_line "$work/err" "bad value '.*' for --checkpoint_lock_wait_s: must be a finite number from 0 to 86400"
  done
  "$T" "${CIFAR[@]}" --steps=100000 --checkpoint_dir="$d" >"$work/a.log" 2>&1 &
  a=$!; pids+=("$a")
  wait_for "$work/a.log" "step      2/" || fail "job A did not start"
  start=$(date +%s)
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" --checkpoint_lock_wait_s=1 \
    >"$work/b.out" 2>"$work/b.err"; code=$?
  cat "$work/b.out" "$work/b.err"
  [ "$code" = 4 ] || fail "exit $code while another job holds the directory, expected 4"
  one_line "$work/b.err" "checkpoint directory $d is in use by another job" \
    "$d/ckpt.lock is locked by host .* pid $a " "gave up after 1 s"
  [ $(( $(date +%s) - start )) -le 30 ] || fail "the 1 s wait took too long"
  # The same with two ranks: rank 0 waits, every rank exits 4.
  "${MPIRUN[@]}" -np 2 "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" \
    --checkpoint_lock_wait_s=1 >"$work/c.log" 2>&1; code=$?
  [ "$code" = 4 ] || { cat "$work/c.log"; fail "two ranks: exit $code, expected 4"; }
  # SIGTERM (scancel, preemption) ends a wait at once: nothing was lost, exit 75.
  # (--collective_timeout must exceed the lock wait: OPERATIONS.md §7.)
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" --checkpoint_lock_wait_s=300 \
    --collective_timeout=600 >"$work/e.log" 2>&1 &
  e=$!; pids+=("$e")
  wait_for "$work/e.log" "waiting up to 300 s" || fail "no waiting message"
  kill -TERM "$e"; wait "$e"; code=$?
  cat "$work/e.log"
  [ "$code" = 75 ] || fail "exit $code after SIGTERM while waiting, expected 75"
  # Training has not started, so the stop-before-training rule ends it (OPERATIONS.md, 75).
  grep -q "stopped by SIGTERM before training started (nothing to save); exit 75" "$work/e.log" \
    || fail "no message about the stop"
  kill -TERM "$a"; wait "$a"; code=$?
  [ "$code" = 75 ] || fail "job A exit $code after SIGTERM"
  ;;
resume_none)
  d="$work/d"
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >/dev/null || fail "first run"
  before=$(md5sum "$d"/ckpt-*.h5)
  # Another run (other lr) from scratch into the same directory.
  "$T" "${CIFAR[@]}" --steps=2 --lr=0.05 --resume=none --checkpoint_dir="$d" \
    >"$work/out" 2>"$work/err"; code=$?
  cat "$work/out" "$work/err"
  [ "$code" = 2 ] || fail "--resume=none over existing checkpoints: exit $code, expected 2"
  one_line "$work/err" "--resume=none but checkpoint directory $d already holds a checkpoint" \
    "ckpt-000000002.h5" "--resume=auto"
  [ "$(md5sum "$d"/ckpt-*.h5)" = "$before" ] || fail "the earlier run's checkpoints changed"
  # An empty (or new) directory is fine.
  "$T" "${CIFAR[@]}" --steps=2 --resume=none --checkpoint_dir="$work/fresh" >/dev/null \
    || fail "--resume=none into a new directory"
  ;;
crafted_shapes)
  need_h5py
  d="$work/d"
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >/dev/null || fail "run to 2"
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" >/dev/null || fail "run to 4"
  # Copies of ckpt 4 with /params/conv1/weight replaced by a float32 dataset (chunked,
  # Fletcher-32, nothing written) of a crafted shape.
  "$PY" - "$d/ckpt-000000004.h5" "$work" <<'PY' || fail "h5py could not craft the files"
import shutil, sys, h5py, numpy as np
src, out = sys.argv[1], sys.argv[2]
for name, shape, chunk in [("overflow", (2**32, 2**32), (1, 1024)),
                           ("big31", (2**31 + 16,), (2**20,)),
                           ("big40", (2**40,), (2**20,)),
                           ("big28", (2**28,), (2**20,))]:
    path = f"{out}/{name}.h5"
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        del f["params/conv1/weight"]
        d = f.create_dataset("params/conv1/weight", shape=shape, dtype="<f4", chunks=chunk,
                             fletcher32=True)
        d.attrs["learnable"] = np.int64(1)
PY
  for name in overflow big31 big40 big28; do
    f="$work/$name.h5"
    /usr/bin/time -f "%M" -o "$work/rss" "$T" "${CIFAR[@]}" --steps=6 --resume="$f" \
      >/dev/null 2>"$work/err"; code=$?
    rss=$(tail -n 1 "$work/rss")
    echo "$name: trainer exit $code, max RSS ${rss} KB: $(cat "$work/err")"
    [ "$code" = 1 ] || fail "$name: trainer exit $code, expected 1 (a corrupt checkpoint)"
    one_line "$work/err" "$f" "/params/conv1/weight has shape"
    [ "$rss" -lt 1000000 ] || fail "$name: the trainer took ${rss} KB"
    /usr/bin/time -f "%M" -o "$work/rss" "$DIFF" "$f" "$d/ckpt-000000004.h5" \
      >/dev/null 2>"$work/err"; code=$?
    rss=$(tail -n 1 "$work/rss")
    [ "$code" = 2 ] || fail "$name: checkpoint_diff exit $code, expected 2"
    one_line "$work/err" "$f" "/params/conv1/weight has shape"
    [ "$rss" -lt 1000000 ] || fail "$name: checkpoint_diff took ${rss} KB"
  done
  # --resume=auto: the crafted newest checkpoint is skipped with a warning, like any
  # corrupt one, and the run continues from the one before (not a crash at every restart).
  cp "$work/overflow.h5" "$d/ckpt-000000004.h5"
  out=$("$T" "${CIFAR[@]}" --steps=6 --checkpoint_dir="$d" 2>&1) || fail "auto resume: $out"
  echo "$out" | grep -E "warning|resumed"
  echo "$out" | grep -q "warning: skipped: $d/ckpt-000000004.h5: /params/conv1/weight has shape" \
    || fail "no warning about the crafted file"
  echo "$out" | grep -q "resumed    from $d/ckpt-000000002.h5" || fail "did not fall back to step 2"
  ;;
weights_only)
  need_h5py
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/d" >/dev/null || fail "run"
  "$PY" - "$work/d/ckpt-000000002.h5" "$work/weights.h5" <<'PY' || fail "h5py"
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    del f["optimizer"]
    f.attrs["has_optimizer_state"] = np.int64(0)
PY
  out=$("$T" "${CIFAR[@]}" --steps=4 --resume="$work/weights.h5" 2>&1) || fail "resume: $out"
  echo "$out" | grep -E "resumed|note"
  note="weights only (no optimizer state): velocities start at zero; fine for fine-tuning, not"
  echo "$out" | grep -q "^  note       $note an exact resume$" || fail "no weights-only note"
  # A full checkpoint gets no such note.
  out=$("$T" "${CIFAR[@]}" --steps=4 --resume="$work/d/ckpt-000000002.h5" 2>&1) || fail "resume 2"
  if echo "$out" | grep "note       weights only"; then fail "note on a full checkpoint"; fi
  ;;
beyond_steps)
  d="$work/d"
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" >/dev/null || fail "run"
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" >"$work/out" 2>"$work/err"; code=$?
  cat "$work/out" "$work/err"
  [ "$code" = 0 ] || fail "checkpoint at --steps: exit $code, expected 0"
  grep -q "checkpoint $d/ckpt-000000004.h5 is at step 4 = --steps=4: the run is complete, nothing" \
    "$work/out" || fail "no nothing-to-train message"
  if grep -iq "nan" "$work/out"; then fail "printed a NaN loss"; fi
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >"$work/out" 2>"$work/err"; code=$?
  cat "$work/out" "$work/err"
  [ "$code" = 2 ] || fail "checkpoint beyond --steps: exit $code, expected 2"
  one_line "$work/err" "is at step 4 > --steps=2: nothing to train; raise --steps"
  if grep -iq "nan" "$work/out"; then fail "printed a NaN loss"; fi
  [ -e "$d/ckpt-000000004.h5" ] || fail "the checkpoint went away"
  ;;
hdf5_one_line)
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/d" >/dev/null || fail "run"
  good="$work/d/ckpt-000000002.h5"
  head -c 20000 "$good" > "$work/truncated.h5"
  "$T" "${CIFAR[@]}" --steps=4 --resume="$work/truncated.h5" >/dev/null 2>"$work/err"
  one_line "$work/err" "truncated.h5"
  "$DIFF" "$work/truncated.h5" "$good" >/dev/null 2>"$work/err"
  one_line "$work/err" "truncated.h5"
  # Shard directories whose index is not HDF5, or a truncated HDF5 file.
  mkdir -p "$work/junk" "$work/cut"
  echo "not hdf5" > "$work/junk/dataset.h5"
  cp "$work/truncated.h5" "$work/cut/dataset.h5"
  for ds in junk cut; do
    "$T" "${CIFAR[@]}" --data="$work/$ds" --steps=1 >/dev/null 2>"$work/err"
    one_line "$work/err" "$work/$ds/dataset.h5"
  done
  # The predictions file cannot be created (HDF5 printed its stack here before).
  "$T" "${CIFAR[@]}" --mode=predict --val_data=synthetic --checkpoint_dir="$work/d" \
    --predictions="$work/no/such/dir/p.h5" >/dev/null 2>"$work/err"; code=$?
  [ "$code" != 0 ] || fail "predictions into a missing directory succeeded"
  one_line "$work/err" "p.h5"
  ;;
lock_file)
  # ckpt.lock is opened for writing and truncated: never through a symbolic link, never a
  # file with another name too, never a file that is not a lock file. Through a symlinked
  # ckpt.lock the trainer once truncated a 1.17 MB checkpoint to 44 bytes (exit 0).
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/a" >/dev/null || fail "run"
  victim="$work/victim.h5"
  cp "$work/a/ckpt-000000002.h5" "$victim"
  sum=$(md5sum < "$victim")
  for kind in symlink hardlink copy; do
    d="$work/$kind"
    mkdir -p "$d"
    case $kind in
      symlink) ln -s "$victim" "$d/ckpt.lock"; why="is a symbolic link" ;;
      hardlink) ln "$victim" "$d/ckpt.lock"; why="has 2 hard links" ;;
      copy) cp "$victim" "$d/ckpt.lock"; why="is not a lock file" ;;
    esac
    "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >"$work/out" 2>"$work/err"; code=$?
    cat "$work/out" "$work/err"
    [ "$code" = 2 ] || fail "$kind ckpt.lock: exit $code, expected 2"
    one_line "$work/err" "$d/ckpt.lock" "$why" "remove it"
    [ "$(md5sum < "$victim")" = "$sum" ] || fail "$kind ckpt.lock: the file behind it changed"
    if ls "$d"/ckpt-*.h5 2>/dev/null; then fail "$kind ckpt.lock: trained anyway"; fi
  done
  # Removed, as the message says: the run goes ahead.
  rm "$work/symlink/ckpt.lock"
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$work/symlink" >/dev/null \
    || fail "the run after removing the link"
  [ "$(md5sum < "$victim")" = "$sum" ] || fail "the file behind the link changed"
  ;;
bad_attributes)
  need_h5py
  d="$work/d"
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >/dev/null || fail "run"
  good="$d/ckpt-000000002.h5"
  # Copies with one root attribute changed, as h5py (or a damaged disk) could.
  "$PY" - "$good" "$work" <<'PY' || fail "h5py could not craft the files"
import shutil, sys, h5py, numpy as np
src, out = sys.argv[1], sys.argv[2]
for name, attr, value in [("num_classes", "num_classes", 0), ("columns", "columns", 0),
                          ("input_size", "input_size", 24), ("epoch", "epoch", 7)]:
    shutil.copy(src, f"{out}/{name}.h5")
    with h5py.File(f"{out}/{name}.h5", "r+") as f:
        f.attrs[attr] = np.int64(value)
PY
  # Out of range: a corrupt file (exit 1; checkpoint_diff: a read error, exit 2). Both once
  # resumed with exit 0, and checkpoint_diff called them "same".
  for attr in num_classes columns; do
    f="$work/$attr.h5"
    "$T" "${CIFAR[@]}" --steps=4 --resume="$f" >/dev/null 2>"$work/err"; code=$?
    [ "$code" = 1 ] || fail "$attr=0: trainer exit $code, expected 1"
    one_line "$work/err" "$f" "attribute /$attr = 0 is out of range \[1, "
    "$DIFF" "$f" "$good" >/dev/null 2>"$work/err"; code=$?
    [ "$code" = 2 ] || fail "$attr=0: checkpoint_diff exit $code, expected 2"
    one_line "$work/err" "$f" "attribute /$attr = 0 is out of range"
  done
  # Another input size than the model being built: a mismatch, named with its flag.
  f="$work/input_size.h5"
  "$T" "${CIFAR[@]}" --steps=4 --resume="$f" >/dev/null 2>"$work/err"; code=$?
  [ "$code" = 1 ] || fail "input_size=24: trainer exit $code, expected 1"
  one_line "$work/err" "$f" "attribute /input_size is 24" "--input_size"
  # checkpoint_diff compares the attributes: each difference named, "DIFFERENT", exit 1.
  for attr in input_size epoch; do
    "$DIFF" "$work/$attr.h5" "$good" >"$work/out" 2>&1; code=$?
    cat "$work/out"
    [ "$code" = 1 ] || fail "$attr changed: checkpoint_diff exit $code, expected 1"
    grep -q "^attribute /$attr differs: " "$work/out" || fail "$attr: no attribute line"
    grep -q "^DIFFERENT: " "$work/out" || fail "$attr: not DIFFERENT"
  done
  "$DIFF" "$work/input_size.h5" "$good" >"$work/out" 2>&1
  grep -q "^attribute /input_size differs: 24 vs 32$" "$work/out" \
    || fail "the input_size line does not give both values: $(cat "$work/out")"
  "$DIFF" "$good" "$good" >"$work/out" 2>&1 || { cat "$work/out"; fail "a file differs from itself"; }
  grep -q "^same: " "$work/out" || fail "not same"
  ;;
corrupt_cursor)
  need_h5py
  d="$work/d"
  "$T" "${CIFAR[@]}" --steps=2 --checkpoint_dir="$d" >/dev/null || fail "run to 2"
  "$T" "${CIFAR[@]}" --steps=4 --checkpoint_dir="$d" >/dev/null || fail "run to 4"
  # The synthetic training set has 512 images: a cursor may point at 0 .. 512 (512: the
  # epoch is done, the next batch starts the next one).
  "$PY" - "$d/ckpt-000000004.h5" "$work" <<'PY' || fail "h5py could not craft the files"
import shutil, sys, h5py, numpy as np
src, out = sys.argv[1], sys.argv[2]
for name, position in [("far", 2**62), ("past", 513), ("end", 512)]:
    shutil.copy(src, f"{out}/{name}.h5")
    with h5py.File(f"{out}/{name}.h5", "r+") as f:
        f.attrs["cursor_position"] = np.int64(position)
PY
  # --resume=PATH on such a file: a corrupt checkpoint, a runtime error (exit 1) naming it,
  # not a usage error (it was exit 2, "start cursor ... outside the dataset").
  for name in far past; do
    f="$work/$name.h5"
    "$T" "${CIFAR[@]}" --steps=6 --resume="$f" >/dev/null 2>"$work/err"; code=$?
    [ "$code" = 1 ] || fail "$name: exit $code, expected 1: $(cat "$work/err")"
    one_line "$work/err" "$f" "attribute /cursor_position = " "512 images"
  done
  out=$("$T" "${CIFAR[@]}" --steps=6 --resume="$work/end.h5" 2>&1) \
    || fail "a cursor at the end of the epoch: $out"
  # --resume=auto (a requeued job): the corrupt newest file is skipped with a warning and
  # the one before resumes. Every restart used to stop with exit 2, for ever.
  cp "$work/far.h5" "$d/ckpt-000000004.h5"
  out=$("$T" "${CIFAR[@]}" --steps=6 --checkpoint_dir="$d" 2>&1); code=$?
  echo "$out" | grep -E "warning|resumed|error"
  [ "$code" = 0 ] || fail "auto resume past the corrupt file: exit $code"
  echo "$out" | grep -q \
    "warning: skipped: $d/ckpt-000000004.h5: attribute /cursor_position = 4611686018427387904" \
    || fail "no warning naming the corrupt file"
  echo "$out" | grep -q "resumed    from $d/ckpt-000000002.h5 at step 2" \
    || fail "did not resume from step 2"
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
