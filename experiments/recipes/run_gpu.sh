#!/usr/bin/env bash
# Issue 35 point 4: time to accuracy, Colonnade next to its peers on the same card and the
# same data, one part per device call (experiments/recipes/README.md: carry lists, recipes).
#
#   COMMIT=$(git rev-parse HEAD) experiments/recipes/run_gpu.sh PART OUTDIR
#
#   PART cifar       (a) resnet9 on CIFAR-10 (CIFAR_EPOCHS, each its own run) and airbench's
#                        airbench94_muon.py (AB_RUNS timed runs after its compile) on the
#                        same JPEGs; carry .deps and .gpu_data/cifar10-jpeg.tar.gz
#   PART imagenette  (b) MODEL on Imagenette 128 px, IMG_EPOCHS (5 and 20), Colonnade and
#                        torchvision_recipe.py; carry .deps and .gpu_data/imagenette-small
#   PART largebatch  (c) MODEL on Imagenette, batch 256 (SGD) and LB_BATCHES with LARS,
#                        LB_EPOCHS epochs; same carry as imagenette
#
# OUTDIR gets results.jsonl (one record per run, results.py's fields), summary.txt and
# logs.tgz (every log, metrics file and the build log), refreshed after every run so that a
# call stopped by its time limit still returns what finished. Every run has a timeout and
# starts only while BUDGET (seconds since this script started, build included) has room.
#
# Knobs: BUDGET (560), BUILD (build-gpu), PYTHON (python3), THREADS (12), SEED (1), MODEL
# (resnet50d), CIFAR_EPOCHS ("24 16 10"), AB_RUNS (5), IMG_EPOCHS ("5 20"), IMG_IMPLS
# ("colonnade torchvision"), LR (0.1 at batch 256), WD (5e-5), RRC_SCALE (0.35,1),
# LB_EPOCHS (20), LB_BATCHES ("2048 4096"), LARS_LR (0.6 at batch 256, linear scaling),
# LB_WARMUP (5). TINY=1: a CPU test at tiny sizes (build-dev, --device=cpu, a few steps,
# CIFAR-10 cut to 40 + 8 images a class, Imagenette replaced by those at 128 px, no airbench).
set -uo pipefail
PART=${1:?usage: run_gpu.sh cifar|imagenette|largebatch OUTDIR}
OUT=${2:?usage: run_gpu.sh cifar|imagenette|largebatch OUTDIR}
case $PART in cifar|imagenette|largebatch) ;; *) echo "run_gpu.sh: unknown PART $PART" >&2; exit 2 ;; esac
T_START=$(date +%s.%N)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/experiments/recipes
TINY=${TINY:-0}
BUDGET=${BUDGET:-560}
PYTHON=${PYTHON:-python3}
THREADS=${THREADS:-12}
SEED=${SEED:-1}
MODEL=${MODEL:-resnet50d}
COMMIT=${COMMIT:-$("$PYTHON" "$ROOT/scripts/record_commit.py" --which 2>/dev/null || echo unknown)}
WORK=${WORK:-/tmp/recipes-$PART}
LOGS=$WORK/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
: > "$OUT/summary.txt"
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$TINY" = 1 ]; then
  BUILD=${BUILD:-$ROOT/build-dev}
  DEVICE=cpu
  DEV_NAME=cpu
else
  BUILD=${BUILD:-$ROOT/build-gpu}
  DEVICE=cuda
  DEV_NAME=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
fi

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { printf '%s [%6ss] %s\n' "$(date +%T)" "$(since "$T_START")" "$*" | tee -a "$OUT/summary.txt" >&2; }
pack() { tar czf "$OUT/logs.tgz" -C "$WORK" logs 2>/dev/null; }
trap pack EXIT
# Seconds the next run may take: at most $1, and what BUDGET leaves (0: skip it).
allowance() {
  awk -v t0="$T_START" -v now="$(now)" -v b="$BUDGET" -v r="$1" \
    'BEGIN { left = b - (now - t0) - 10; a = left < r ? left : r; printf "%d", a < 20 ? 0 : a }'
}
# record KIND METRICS_OR_LOG COMMON_ARGS...: appends results.py's record(s) to results.jsonl
record() {
  "$PYTHON" "$HERE/results.py" "$@" --device "$DEV_NAME" --commit "$COMMIT" >> "$RESULTS" ||
    say "results.py $1 failed for $2"
}

say "run_gpu.sh $PART: device '$DEV_NAME', commit $COMMIT, budget ${BUDGET}s, tiny=$TINY"
{ date -u; echo "commit: $COMMIT"; nproc; nvidia-smi 2>&1
  "$PYTHON" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$LOGS/environment.txt"

# ---- data that needs no build, in the background ----------------------------------------
JPEG=$WORK/cifar10-jpeg
prepare_cifar_jpeg() {  # unpack; in TINY mode 40 training and 8 test images a class
  rm -rf "$JPEG" && mkdir -p "$WORK" || return 1
  if [ "$TINY" = 1 ]; then
    tar xzf "$ROOT/.gpu_data/cifar10-jpeg.tar.gz" -C "$WORK" --wildcards \
      'cifar10-jpeg/train/*/00[0-3][0-9].jpg' 'cifar10-jpeg/test/*/000[0-7].jpg'
  else
    tar xzf "$ROOT/.gpu_data/cifar10-jpeg.tar.gz" -C "$WORK"
  fi
}
AB_DIR=$WORK/airbench
BG_PID=
if [ "$PART" = cifar ]; then
  [ -f "$ROOT/.gpu_data/cifar10-jpeg.tar.gz" ] || { say "missing .gpu_data/cifar10-jpeg.tar.gz: run experiments/recipes/prepare_data.sh and carry it"; exit 2; }
  { t=$(now)
    prepare_cifar_jpeg && mkdir -p "$AB_DIR/cifar10" &&
      "$PYTHON" "$HERE/airbench_cache.py" "$JPEG" "$AB_DIR/cifar10" --workers "$(nproc)"
    echo "rc=$? in $(since "$t") s"; } > "$LOGS/airbench_cache.log" 2>&1 &
  BG_PID=$!
else
  IMG=${IMG:-$ROOT/.gpu_data/imagenette-small}
  if [ "$TINY" = 1 ]; then IMG=$WORK/imagenette-tiny; fi
  [ "$TINY" = 1 ] || [ -f "$IMG/train/dataset.h5" ] ||
    { say "missing $IMG: run experiments/recipes/prepare_data.sh and carry .gpu_data/imagenette-small"; exit 2; }
fi

# ---- build (trainer, make_shards) -----------------------------------------------------------
if [ "$TINY" != 1 ]; then
  if [ ! -d /opt/absl/usr ]; then
    for deb in "$ROOT"/.deps/libabsl*.deb; do dpkg -x "$deb" /opt/absl; done
  fi
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  t=$(now)
  { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF -DCMAKE_PREFIX_PATH=/opt/absl/usr &&
    cmake --build "$BUILD" -j"$(nproc)" --target trainer make_shards; } > "$LOGS/build.log" 2>&1
  rc=$?
  b=$(since "$t")
  echo "{\"what\": \"build\", \"run\": \"trainer make_shards\", \"wall_s\": $b, \"exit\": $rc, \"device\": \"$DEV_NAME\", \"commit\": \"$COMMIT\"}" >> "$RESULTS"
  say "build rc=$rc in ${b}s"
  [ $rc -eq 0 ] || { grep -E "error" "$LOGS/build.log" | head -20 >&2; exit 1; }
fi
TRAINER=$BUILD/trainer
HELP=$("$TRAINER" --help 2>&1)
has() { grep -q -- "--$1[=\" ]" <<< "$HELP"; }

# The optimisation options (label smoothing, Nesterov, LARS): used where this trainer has them, and the
# records' flags say what actually ran.
LS_CIFAR=() LS_IMG=() NESTEROV=()
if has label_smoothing; then LS_CIFAR=(--label_smoothing=0.2); LS_IMG=(--label_smoothing=0.1)
else say "NOTE: this trainer has no --label_smoothing (an older tree): runs without it"; fi
if has nesterov; then NESTEROV=(--nesterov); fi

# run_colonnade WHAT NAME LIMIT TARGET EPOCHS BATCH DATA_DIR VAL_DIR FLAGS...
run_colonnade() {
  local what=$1 name=$2 limit=$3 target=$4 epochs=$5 batch=$6 data=$7 val=$8; shift 8
  local lim per n t rc wall steps=() tiny=() tgt=()
  [ -z "$target" ] || tgt=(--target "$target")
  lim=$(allowance "$limit")
  if [ "$lim" -eq 0 ]; then say "skipped $name: budget spent"; return; fi
  n=$("$PYTHON" -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$data/dataset.h5")
  per=$(( n / batch )); [ $per -ge 1 ] || per=1
  steps=(--epochs="$epochs")
  if [ "$TINY" = 1 ]; then per=2; tiny=(--steps=4); fi
  local flags=(--model="$MODEL_RUN" --device="$DEVICE" --data="$data" --val_data="$val"
    --batch_size="$batch" "$@" "${steps[@]}" "${tiny[@]}" --seed="$SEED"
    --eval_every="$per" --log_every="$per" --data_threads="$THREADS"
    --metrics_file="$LOGS/$name.metrics.jsonl")
  [ "$TINY" = 1 ] || flags+=(--precision=bf16)
  rm -f "$LOGS/$name.metrics.jsonl"
  t=$(now)
  timeout -s TERM -k 15 "$lim" "$TRAINER" "${flags[@]}" > "$LOGS/$name.log" 2>&1
  rc=$?
  wall=$(since "$t")
  record colonnade "$LOGS/$name.metrics.jsonl" --what "$what" --run "$name" --model "$MODEL_RUN" \
    --flags="${flags[*]}" --epochs "$epochs" --batch "$batch" --wall "$wall" --exit "$rc" \
    "${tgt[@]}"
  say "colonnade $name rc=$rc wall ${wall}s: $(grep -E '^(eval|done)' "$LOGS/$name.log" | tail -n 2 | tr '\n' ' ')"
  pack
}

# run_torchvision WHAT NAME LIMIT TARGET EPOCHS BATCH ARGS...
run_torchvision() {
  local what=$1 name=$2 limit=$3 target=$4 epochs=$5 batch=$6; shift 6
  local lim t rc wall tiny=() tgt=() run_epochs=$epochs
  [ -z "$target" ] || tgt=(--target "$target")
  lim=$(allowance "$limit")
  if [ "$lim" -eq 0 ]; then say "skipped $name: budget spent"; return; fi
  if [ "$TINY" = 1 ]; then
    tiny=(--precision fp32 --no-channels_last --workers 2)
    run_epochs=$(awk -v n="$(( $("$PYTHON" -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r').attrs['size']))" "$IMG/train/dataset.h5") / batch ))" 'BEGIN { printf "%g", 4 / n }')
  fi
  local args=(--train "$IMG/train" --val "$IMG/val" --model "$MODEL" --epochs "$run_epochs"
    --batch "$batch" "$@" --seed "$SEED" --workers "$THREADS" --device "$DEVICE" "${tiny[@]}")
  rm -f "$LOGS/$name.metrics.jsonl"
  t=$(now)
  timeout -s TERM -k 15 "$lim" "$PYTHON" "$HERE/torchvision_recipe.py" "${args[@]}" \
    --commit "$COMMIT" --metrics "$LOGS/$name.metrics.jsonl" > "$LOGS/$name.log" 2>&1
  rc=$?
  wall=$(since "$t")
  record torchvision "$LOGS/$name.metrics.jsonl" --what "$what" --run "$name" --model "$MODEL" \
    --flags="${args[*]}" --epochs "$epochs" --batch "$batch" --wall "$wall" --exit "$rc" \
    "${tgt[@]}"
  say "torchvision $name rc=$rc wall ${wall}s: $(grep -o '"heldout_top1": [0-9.]*' "$LOGS/$name.metrics.jsonl" | tail -n 1)"
  pack
}

# The batch of a run: as given on the GPU, /128 (at least 2) in TINY mode.
bs() { if [ "$TINY" = 1 ]; then echo $(( $1 / 128 > 2 ? $1 / 128 : 2 )); else echo "$1"; fi; }
warmup_for() { awk -v e="$1" -v f="$2" 'BEGIN { w = e * f; if (w < 1) w = 1; printf "%g", int(w + 0.5) }'; }

# ---- (a) CIFAR-10 -------------------------------------------------------------------------
part_cifar() {
  local C=$WORK/cifar10 rc t
  wait "$BG_PID"
  say "airbench cache: $(tail -n 1 "$LOGS/airbench_cache.log")"
  [ -d "$JPEG/train" ] || { say "no CIFAR-10 JPEG folders"; return 1; }
  t=$(now)
  rm -rf "$C"
  # prepare_cifar10.sh's conversion (raw shards: no JPEG decode while training), run on the
  # tree unpacked above.
  "$BUILD/make_shards" --source=folder --input="$JPEG/train" --output="$C/train" \
    --threads=0 --progress=false > "$LOGS/make_shards.log" 2>&1 &&
    "$BUILD/make_shards" --source=folder --input="$JPEG/test" --output="$C/test" \
      --mean_from="$C/train" --threads=0 --progress=false >> "$LOGS/make_shards.log" 2>&1
  rc=$?
  say "CIFAR-10 shards rc=$rc in $(since "$t")s"
  [ $rc -eq 0 ] || return 1

  # airbench first (its timed runs alone on the GPU), then Colonnade.
  if [ "$TINY" = 1 ]; then
    say "TINY: airbench skipped (it needs CUDA)"
  elif [ ! -f "$ROOT/.deps/airbench/airbench94_muon.py" ]; then
    say "no .deps/airbench/airbench94_muon.py: carry .deps (prepare_data.sh fetches it)"
  else
    local lim; lim=$(allowance 330)
    # The one patch: 200 timed runs -> AB_RUNS (the rest of the file runs as published).
    sed "s/for run in range(200)/for run in range(${AB_RUNS:-5})/" \
      "$ROOT/.deps/airbench/airbench94_muon.py" > "$AB_DIR/airbench94_muon.py"
    if ! grep -q "for run in range(${AB_RUNS:-5})" "$AB_DIR/airbench94_muon.py"; then
      say "airbench: the run-count patch did not apply; running the file unpatched (200 runs, stopped by the timeout)"
    fi
    if [ "$lim" -gt 0 ]; then
      t=$(now)
      (cd "$AB_DIR" && STAMP_T0=$t timeout -s TERM -k 10 "$lim" "$PYTHON" -u airbench94_muon.py 2>&1 |
        STAMP_T0=$t "$PYTHON" "$HERE/results.py" stamp) > "$LOGS/airbench.log"
      rc=${PIPESTATUS[0]}
      local wall; wall=$(since "$t")
      record airbench "$LOGS/airbench.log" --what cifar --run airbench94_muon --model airbench94 \
        --flags="airbench94_muon.py as published ($(cat "$ROOT/.deps/airbench/COMMIT" 2>/dev/null)), range(200) -> range(${AB_RUNS:-5})" \
        --epochs 8 --batch 2000 --wall "$wall" --exit "$rc" --target "${CIFAR_TARGET:-0.907}"
      say "airbench rc=$rc wall ${wall}s: $(grep -E 'eval|Mean' "$LOGS/airbench.log" | tail -n 3 | tr '\n' ' ')"
      pack
    else
      say "skipped airbench: budget spent"
    fi
  fi

  MODEL_RUN=resnet9
  local e w
  for e in ${CIFAR_EPOCHS:-24 16 10}; do
    w=$(warmup_for "$e" 0.2083)  # Page's 5 of 24
    run_colonnade cifar "resnet9_e$e" 150 "${CIFAR_TARGET:-0.907}" "$e" "$(bs 512)" "$C/train" "$C/test" \
      --pad=4 --mirror --cutout=8 --mean=channel --eval_views=2 --lr_schedule="cosine+warmup:$w" \
      "${LS_CIFAR[@]}" "${NESTEROV[@]}"
  done
}

# ---- Imagenette (b) and (c) ---------------------------------------------------------------
make_tiny_imagenette() {  # TINY: 10-class 128 px JPEG shards cut from CIFAR-10
  prepare_cifar_jpeg || return 1
  rm -rf "$IMG"
  "$BUILD/make_shards" --source=folder --input="$JPEG/train" --output="$IMG/train" \
    --resize_exact=128 --encoding=jpeg --jpeg_quality=50 --progress=false > "$LOGS/make_shards.log" 2>&1 &&
    "$BUILD/make_shards" --source=folder --input="$JPEG/test" --output="$IMG/val" \
      --resize_exact=128 --encoding=jpeg --jpeg_quality=50 --mean_from="$IMG/train" \
      --progress=false >> "$LOGS/make_shards.log" 2>&1
}

IMG_COMMON=(--crop=128 --random_resized_crop --rrc_scale="${RRC_SCALE:-0.35,1}" --mirror
  --mean=channel --eval_views=2 --momentum=0.9 --weight_decay="${WD:-5e-5}")
TV_COMMON=(--crop 128 --rrc_scale "${RRC_SCALE:-0.35,1}" --eval_views 2
  --momentum 0.9 --weight_decay "${WD:-5e-5}" --label_smoothing 0.1)

part_imagenette() {
  MODEL_RUN=$MODEL
  local e w target impl
  for e in ${IMG_EPOCHS:-5 20}; do
    w=$(warmup_for "$e" 0.1)
    target=0.874; [ "$e" -ge 20 ] && target=0.916
    for impl in ${IMG_IMPLS:-colonnade torchvision}; do
      if [ "$impl" = colonnade ]; then
        run_colonnade imagenette "colonnade_${MODEL}_e$e" 200 "$target" "$e" "$(bs 256)" "$IMG/train" \
          "$IMG/val" "${IMG_COMMON[@]}" --lr="${LR:-0.1}" --lr_schedule="cosine+warmup:$w" "${LS_IMG[@]}"
      else
        run_torchvision imagenette "torchvision_${MODEL}_e$e" 200 "$target" "$e" "$(bs 256)" \
          "${TV_COMMON[@]}" --lr "${LR:-0.1}" --warmup "$w"
      fi
    done
  done
}

part_largebatch() {
  MODEL_RUN=$MODEL
  local e=${LB_EPOCHS:-20} b w=${LB_WARMUP:-5}
  run_colonnade largebatch "colonnade_${MODEL}_b256_sgd" 150 "" "$e" "$(bs 256)" "$IMG/train" "$IMG/val" \
    "${IMG_COMMON[@]}" --lr="${LR:-0.1}" --lr_schedule="cosine+warmup:$w" "${LS_IMG[@]}"
  if ! has optimizer || ! has lr_scaling; then
    say "this trainer has no --optimizer=lars / --lr_scaling (an older tree): large-batch runs skipped"
    return
  fi
  for b in ${LB_BATCHES:-2048 4096}; do
    b=$(bs "$b")
    run_colonnade largebatch "colonnade_${MODEL}_b${b}_lars" 150 "" "$e" "$b" "$IMG/train" "$IMG/val" \
      "${IMG_COMMON[@]}" --optimizer=lars --lars_eta=0.001 --lr_scaling=linear \
      --lr_reference_batch=256 --lr="${LARS_LR:-0.6}" --lr_schedule="cosine+warmup:$w" "${LS_IMG[@]}"
  done
}

if [ "$PART" != cifar ] && [ "$TINY" = 1 ]; then
  make_tiny_imagenette || { say "tiny Imagenette failed"; exit 1; }
fi
"part_$PART"
say "all done in $(since "$T_START")s; $(grep -c . "$RESULTS") records"
"$PYTHON" "$HERE/results.py" summary "$RESULTS" | tee -a "$OUT/summary.txt"
pack
