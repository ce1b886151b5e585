#!/usr/bin/env bash
# The peer comparison of training quality (issue 12, point 19) in one call on the GPU
# machine: Colonnade's trainer and torchvision's ResNet-18 with the same recipe on the same
# Imagenette shards, seeds 1 and 2 each (experiments/peer_quality/README.md).
#
#   COMMIT=$(git rev-parse HEAD) experiments/peer_quality/run.sh OUTDIR [BUILD_DIR]
#
# Needs .gpu_data/imagenette-small/{train,val} (prepare_data.sh; carried to the machine) and
# python3 with torch, torchvision, h5py, Pillow. BUILD_DIR (default build-gpu) is built with
# CUDA (target trainer only) when it has no trainer; the build is timed apart from BUDGET.
# Writes OUTDIR/results/: {colonnade,torchvision}_seedS.jsonl (every record carries the
# commit), *.log, raw/ (the trainer's own metrics), environment.txt, summary.md; and
# OUTDIR/results.tgz of all of it.
#
# Knobs (environment): EPOCHS (18), CROP (112), SEEDS ("1 2"), IMPLS ("colonnade
# torchvision"), WD_ON (weights | all: the weight-decay rule on both sides), INIT
# (torchvision | colonnade: the torchvision side's initialisation), PRECISION (fp32 | tf32,
# torchvision side; Colonnade is always strict FP32), SCHEDULE (sequential: one run at a time,
# every wall time clean; paired: Colonnade and torchvision of one seed together, wall times
# not comparable; solo-then-paired: the first seed alone, the others paired), THREADS (12
# loader threads per run alone, half each when paired), RUN_TIMEOUT (95 s per run),
# BUDGET (330 s for all runs: a run starts only with at least 30 s left and gets at most the
# time left), DATA, PYTHON (python3), COMMIT; for tests only: DEVICE (cuda), BATCH (128).
set -uo pipefail
OUT=${1:?usage: COMMIT=SHA run.sh OUTDIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/experiments/peer_quality
BUILD=${2:-$ROOT/build-gpu}
DATA=${DATA:-$ROOT/.gpu_data/imagenette-small}
EPOCHS=${EPOCHS:-18}
CROP=${CROP:-112}
SEEDS=${SEEDS:-1 2}
IMPLS=${IMPLS:-colonnade torchvision}
WD_ON=${WD_ON:-weights}
INIT=${INIT:-torchvision}
PRECISION=${PRECISION:-fp32}
SCHEDULE=${SCHEDULE:-sequential}
THREADS=${THREADS:-12}
RUN_TIMEOUT=${RUN_TIMEOUT:-95}
BUDGET=${BUDGET:-330}
PYTHON=${PYTHON:-python3}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
BATCH=${BATCH:-128}  # the recipe's; other values only for tests
DEVICE=${DEVICE:-cuda}  # cpu: only for tests at tiny scale
mkdir -p "$OUT/results/raw"
OUT=$(cd "$OUT" && pwd)
R=$OUT/results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$R/summary.txt"; }
pack() { tar czf "$OUT/results.tgz" -C "$OUT" results 2>/dev/null; }
trap pack EXIT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

case $WD_ON in weights|all) ;; *) echo "run.sh: WD_ON must be weights or all" >&2; exit 2 ;; esac
case $SCHEDULE in sequential|paired|solo-then-paired) ;;
  *) echo "run.sh: SCHEDULE must be sequential, paired or solo-then-paired" >&2; exit 2 ;; esac
for d in train val; do
  [ -f "$DATA/$d/dataset.h5" ] || {
    echo "run.sh: $DATA/$d/dataset.h5 missing: run experiments/peer_quality/prepare_data.sh and carry .gpu_data/imagenette-small" >&2
    exit 2; }
done
[ "$COMMIT" = unknown ] && say "WARNING: no COMMIT given and no git here: records say commit 'unknown'"

{ date -u; echo "commit: $COMMIT"; nproc; nvidia-smi 2>&1
  "$PYTHON" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
} > "$R/environment.txt"

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

# The trainer's weight-decay rule: --weight_decay_on where the trainer has it; without it the
# rule is fixed to conv/fc weights only (biases, BN gamma/beta: wd_mult 0 in core/layers.cc).
WD_FLAG=()
if "$BUILD/trainer" --help 2>&1 | grep -q -- "--weight_decay_on"; then
  WD_FLAG=(--weight_decay_on="$WD_ON")
elif [ "$WD_ON" = all ]; then
  say "this trainer has no --weight_decay_on: it cannot decay biases and BN; WD_ON=all refused"
  exit 2
else
  say "this trainer has no --weight_decay_on: its fixed rule (weights only) is WD_ON=weights"
fi

TRAIN_SIZE=$("$PYTHON" -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$DATA/train/dataset.h5") || exit 2
PER_EPOCH=$(( TRAIN_SIZE / BATCH ))
say "peer comparison: resnet18, $TRAIN_SIZE train images, crop $CROP, batch $BATCH, $PER_EPOCH steps/epoch, $EPOCHS epochs, lr 0.1 cosine+warmup:1, momentum 0.9, wd 5e-4 on $WD_ON, seeds $SEEDS, schedule $SCHEDULE, commit $COMMIT"

T0=$(now)
# Seconds this run may take: RUN_TIMEOUT, or what BUDGET has left; 0 when under 30 s are left.
allowance() {
  awk -v t0="$T0" -v now="$(now)" -v b="$BUDGET" -v r="$RUN_TIMEOUT" \
    'BEGIN { left = b - (now - t0); a = left < r ? left : r; printf "%d", a < 30 ? 0 : a }'
}

# run_colonnade SEED THREADS SCHEDULE_LABEL SECONDS
run_colonnade() {
  local s=$1 threads=$2 label=$3 limit=$4 t rc
  local raw=$R/raw/colonnade_seed$s.metrics.jsonl
  rm -f "$raw"
  t=$(now)
  timeout -s TERM -k 15 "$limit" "$BUILD/trainer" --model=resnet18 --device="$DEVICE" \
    --data="$DATA/train" --val_data="$DATA/val" --crop="$CROP" --mirror --mean=image \
    --batch_size="$BATCH" --lr=0.1 --lr_schedule=cosine+warmup:1 --momentum=0.9 \
    --weight_decay=5e-4 "${WD_FLAG[@]}" --epochs="$EPOCHS" --seed="$s" \
    --eval_every=$PER_EPOCH --log_every=$PER_EPOCH --data_threads="$threads" \
    --metrics_file="$raw" > "$R/colonnade_seed$s.log" 2>&1
  rc=$?
  local wall; wall=$(since "$t")
  "$PYTHON" "$HERE/summarize.py" colonnade "$raw" "$R/colonnade_seed$s.jsonl" --seed "$s" --commit "$COMMIT"
  "$PYTHON" "$HERE/summarize.py" run "$R/colonnade_seed$s.jsonl" --impl colonnade --seed "$s" \
    --commit "$COMMIT" --wall "$wall" --exit $rc --schedule "$label"
  say "colonnade seed $s ($label, limit ${limit}s) rc=$rc wall ${wall}s $(grep '^eval' "$R/colonnade_seed$s.log" | tail -n 1)"
}

# run_torchvision SEED WORKERS SCHEDULE_LABEL SECONDS
run_torchvision() {
  local s=$1 workers=$2 label=$3 limit=$4 t rc
  rm -f "$R/torchvision_seed$s.jsonl"
  t=$(now)
  timeout -s TERM -k 15 "$limit" "$PYTHON" "$HERE/torchvision_resnet18.py" \
    --train "$DATA/train" --val "$DATA/val" --epochs "$EPOCHS" --crop "$CROP" \
    --batch "$BATCH" --lr 0.1 --lr_schedule cosine+warmup:1 --momentum 0.9 --weight_decay 5e-4 \
    --weight_decay_on "$WD_ON" --init "$INIT" --precision "$PRECISION" --mean image \
    --seed "$s" --workers "$workers" --eval_workers 4 --device "$DEVICE" --commit "$COMMIT" \
    --metrics "$R/torchvision_seed$s.jsonl" > "$R/torchvision_seed$s.log" 2>&1
  rc=$?
  local wall; wall=$(since "$t")
  "$PYTHON" "$HERE/summarize.py" run "$R/torchvision_seed$s.jsonl" --impl torchvision --seed "$s" \
    --commit "$COMMIT" --wall "$wall" --exit $rc --schedule "$label"
  say "torchvision seed $s ($label, limit ${limit}s) rc=$rc wall ${wall}s $(grep '"kind": "final"' "$R/torchvision_seed$s.jsonl" | grep -o '"heldout_top1_error": [0-9.]*')"
}

run_solo() {  # IMPL SEED
  local limit; limit=$(allowance)
  if [ "$limit" -eq 0 ]; then say "skipped $1 seed $2: BUDGET ${BUDGET}s spent"; return; fi
  "run_$1" "$2" "$THREADS" alone "$limit"
}

run_pair() {  # SEED: every impl of IMPLS at once, sharing the loader threads
  local limit n; limit=$(allowance)
  if [ "$limit" -eq 0 ]; then say "skipped seed $1: BUDGET ${BUDGET}s spent"; return; fi
  n=$(( THREADS / 2 > 0 ? THREADS / 2 : 1 ))
  for impl in $IMPLS; do "run_$impl" "$1" "$n" paired "$limit" & done
  wait
}

first=1
for s in $SEEDS; do
  if [ "$SCHEDULE" = sequential ] || { [ "$SCHEDULE" = solo-then-paired ] && [ $first = 1 ]; }; then
    for impl in $IMPLS; do run_solo "$impl" "$s"; done
  else
    run_pair "$s"
  fi
  first=0
done
say "all runs took $(since "$T0") s"

"$PYTHON" "$HERE/summarize.py" table "$R" > "$R/summary.md"
cat "$R/summary.md"
if "$PYTHON" -c "import matplotlib" 2>/dev/null; then
  "$PYTHON" "$HERE/plot.py" "$R" "$R/heldout_error.png" > /dev/null 2>&1 || true
fi
