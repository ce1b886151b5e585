#!/usr/bin/env bash
# The columns experiment (issue 16, experiments/columns/README.md) in one call on the GPU
# machine: AlexNet on the Imagenette subset with --columns=2 (seeds 1, 2, 3), --columns=1
# (the control) and --columns=4, then the conv1 filters and their colour statistics.
#
#   COMMIT=$(git rev-parse HEAD) experiments/columns/run.sh OUTDIR [BUILD_DIR]
#
# Needs DATA (default .gpu_data/columns)/{train,val} from prepare_data.sh (carried to the
# machine) and python3 with h5py, numpy and matplotlib. BUILD_DIR (default build-gpu) is
# built with CUDA (target trainer only) when it has no trainer; the build is timed apart
# from BUDGET.
#
# Runs, in this order (RUNS, names cKsS = --columns=K --seed=S): c2s1 c1s1 c2s2 c4s1 c2s3, one
# at a time, each `trainer --model=alexnet --device=cuda --columns=K --seed=S --epochs=EPOCHS
# --mirror --pad=16 --lighting=0.1` with the model's recipe otherwise (batch 128, lr 0.01
# /10 every 30 epochs, momentum 0.9, weight decay 5e-4, raw pixels minus the mean image),
# an evaluation on the held-out split every EVAL_EPOCHS epochs and at the end, and one
# checkpoint at the end (--keep_checkpoints=1). A run has at most RUN_TIMEOUT seconds and
# starts only while BUDGET (for all runs) has 30 s left; a run stopped by its timeout writes
# a checkpoint on SIGTERM (exit 75; 137 if it needed SIGKILL 30 s later) and is analysed
# like the others.
#
# Writes OUTDIR/results/ (packed into OUTDIR/results.tgz, which is what to fetch):
#   <run>.jsonl             the trainer's train/eval records, each with run, columns, seed and
#                           commit, then a "run" record (exit status, wall time, colour stats)
#   <run>.log               the trainer's output
#   <run>_conv1.png         scripts/show_filters.py: conv1, one block per column
#   <run>_conv1.csv, <run>_conv1_columns.csv   per-filter and per-column colour fractions
#   <run>_conv1.h5          conv1 alone (weights + attributes), for show_filters.py later
#   summary.md              summarize.py table: held-out errors, per-column statistics
#   curves.png              summarize.py curves: held-out error and training loss per epoch
#   environment.txt, summary.txt, build.log
# The checkpoints stay in OUTDIR/ckpt/<run>/ (244 MB each with the optimizer state: too big
# to bring back; the conv1 files are what the analysis needs).
#
# Knobs (environment): EPOCHS (45), EVAL_EPOCHS (5), RUNS, RUN_TIMEOUT (100 s), BUDGET
# (400 s), THREADS (14 data threads), DATA, PYTHON (python3), COMMIT; for tests only:
# DEVICE (cuda), BATCH (the recipe's 128), STEPS (overrides EPOCHS).
set -uo pipefail
OUT=${1:?usage: COMMIT=SHA run.sh OUTDIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/experiments/columns
BUILD=${2:-$ROOT/build-gpu}
DATA=${DATA:-$ROOT/.gpu_data/columns}
EPOCHS=${EPOCHS:-45}
EVAL_EPOCHS=${EVAL_EPOCHS:-5}
RUNS=${RUNS:-c2s1 c1s1 c2s2 c4s1 c2s3}
RUN_TIMEOUT=${RUN_TIMEOUT:-100}
BUDGET=${BUDGET:-400}
THREADS=${THREADS:-14}
PYTHON=${PYTHON:-python3}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-128}
STEPS=${STEPS:-}
mkdir -p "$OUT/results" "$OUT/ckpt"
OUT=$(cd "$OUT" && pwd)
R=$OUT/results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$R/summary.txt"; }
# Every results file names the commit it measured (scripts/check_results.sh): the tables
# written by show_filters.py do not know it, so stamp the folder before packing it.
pack() {
  "$PYTHON" "$ROOT/scripts/record_commit.py" "$COMMIT" "$R" > /dev/null 2>&1 ||
    echo "run.sh: could not stamp $R with commit $COMMIT" >&2
  tar czf "$OUT/results.tgz" -C "$OUT" results 2>/dev/null
}
trap pack EXIT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

for run in $RUNS; do
  [[ $run =~ ^c[0-9]+s[0-9]+$ ]] || { echo "run.sh: RUNS entry '$run' is not cKsS (e.g. c2s1)" >&2; exit 2; }
done
for d in train val; do
  [ -f "$DATA/$d/dataset.h5" ] || {
    echo "run.sh: $DATA/$d/dataset.h5 missing: run experiments/columns/prepare_data.sh and carry .gpu_data/columns" >&2
    exit 2; }
done
"$PYTHON" -c 'import h5py, numpy, matplotlib' 2>/dev/null ||
  { echo "run.sh: $PYTHON lacks h5py, numpy or matplotlib (set PYTHON=)" >&2; exit 2; }
[ "$COMMIT" = unknown ] && say "WARNING: no COMMIT given and no git here: records say commit 'unknown'"

{ date -u; echo "commit: $COMMIT"; nproc; nvidia-smi 2>&1; } > "$R/environment.txt"

# ---- build (not counted in BUDGET) ---------------------------------------------------------
if [ ! -x "$BUILD/trainer" ]; then
  PREFIX=()
  if [ -d /opt/absl/usr ]; then
    PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
    export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  fi
  t=$(now)
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCOLONNADE_CUDA=ON "${PREFIX[@]}" > "$R/build.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target trainer >> "$R/build.log" 2>&1
  rc=$?
  say "build trainer rc=$rc in $(since "$t") s"
  [ $rc -eq 0 ] || { grep -E "error" "$R/build.log" | head -20; exit 1; }
elif [ -d /opt/absl/usr ]; then
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi

TRAIN_SIZE=$("$PYTHON" -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$DATA/train/dataset.h5") || exit 2
PER_EPOCH=$(( TRAIN_SIZE / BATCH ))
[ "$PER_EPOCH" -ge 1 ] || { echo "run.sh: $TRAIN_SIZE training images are fewer than one batch of $BATCH" >&2; exit 2; }
EVAL_EVERY=$(( PER_EPOCH * EVAL_EPOCHS ))
LENGTH=(--epochs="$EPOCHS") length="$EPOCHS epochs"
[ -n "$STEPS" ] && LENGTH=(--steps="$STEPS") length="$STEPS steps"
say "columns experiment: alexnet, $TRAIN_SIZE training images, batch $BATCH, $PER_EPOCH steps/epoch, $length, eval every $EVAL_EVERY steps, runs $RUNS, commit $COMMIT"

T0=$(now)
# Seconds this run may take: RUN_TIMEOUT, or what BUDGET has left; 0 when under 30 s are left.
allowance() {
  awk -v t0="$T0" -v now="$(now)" -v b="$BUDGET" -v r="$RUN_TIMEOUT" \
    'BEGIN { left = b - (now - t0); a = left < r ? left : r; printf "%d", a < 30 ? 0 : a }'
}

for run in $RUNS; do
  cols=${run#c}; cols=${cols%%s*}; seed=${run##*s}
  limit=$(allowance)
  if [ "$limit" -eq 0 ]; then say "skipped $run: BUDGET ${BUDGET}s spent"; continue; fi
  ck=$OUT/ckpt/$run
  rm -rf "$ck"
  raw=$R/$run.metrics.jsonl
  rm -f "$raw"
  t=$(now)
  timeout --preserve-status -s TERM -k 30 "$limit" "$BUILD/trainer" --model=alexnet --device="$DEVICE" \
    --precision=fp32 --columns="$cols" --seed="$seed" --data="$DATA/train" --val_data="$DATA/val" \
    --mirror --pad=16 --lighting=0.1 --batch_size="$BATCH" "${LENGTH[@]}" \
    --eval_every="$EVAL_EVERY" --log_every="$PER_EPOCH" --data_threads="$THREADS" \
    --checkpoint_dir="$ck" --keep_checkpoints=1 --metrics_file="$raw" > "$R/$run.log" 2>&1
  rc=$?
  wall=$(since "$t")
  ckpt=$(find "$ck" -maxdepth 1 -name 'ckpt-*.h5' 2>/dev/null | sort | tail -n 1)
  if [ -n "$ckpt" ]; then
    "$PYTHON" "$ROOT/scripts/show_filters.py" "$ckpt" "$R/${run}_conv1.png" \
      --csv "$R/${run}_conv1.csv" > "$R/${run}_conv1.txt" 2>&1 ||
      say "$run: show_filters.py failed: $(tail -n 1 "$R/${run}_conv1.txt")"
    "$PYTHON" "$HERE/summarize.py" cut "$ckpt" "$R/${run}_conv1.h5" ||
      say "$run: could not cut conv1 out of $ckpt"
  else
    say "$run: no checkpoint in $ck"
  fi
  "$PYTHON" "$HERE/summarize.py" record "$raw" "$R/$run.jsonl" --run "$run" --columns "$cols" \
    --seed "$seed" --commit "$COMMIT" --wall "$wall" --exit "$rc" --limit "$limit" \
    --colour_csv "$R/${run}_conv1_columns.csv" --checkpoint "${ckpt:-}"
  rm -f "$raw"
  say "$run (columns $cols, seed $seed, limit ${limit}s) rc=$rc wall ${wall}s $(grep '^eval' "$R/$run.log" | tail -n 1)"
done
say "all runs took $(since "$T0") s"

"$PYTHON" "$HERE/summarize.py" table "$R" > "$R/summary.md"
cat "$R/summary.md"
"$PYTHON" "$HERE/summarize.py" curves "$R" "$R/curves.png" || say "curves.png failed"
