#!/usr/bin/env bash
# The H200 experiments beyond scripts/gpu_check.sh, in one device call:
#
#   scripts/gpu_experiments.sh OUTDIR [PART...]
#
# PARTs (default: all, in this order):
#   build     configure and build everything with CUDA (build-gpu/, kept between calls)
#   cifar     cifar10-18pct on CIFAR-10 JPEG shards in .gpu_data/cifar10/{train,test}
#             (made here by make_shards from ../shared/data and carried), curves as JSONL
#   parallel  tests/parallel/h200_parallel.sh: two ranks on one GPU vs one, bench_comm
#   data      scripts/data_bench.sh on all cores
#   zoo       bench_train for the model zoo next to torchvision (strict FP32 and TF32)
#   resnet    resnet18-cifar on CIFAR-10, pad 4 + random 32x32 crops + mirrors
#             (RESNET_AUG=--crop=28 for the 28x28-crop variant)
#   alexnet   AlexNet on an Imagenette subset in .gpu_data/inet/{train,val} (350 + 120
#             images per class, JPEG shards), default init vs --paper_init at lr 0.01
# Everything lands in OUTDIR/results/ and is packed into OUTDIR/results.tgz (the device
# tool brings back few files). Knobs: CIFAR_EPOCHS, CIFAR_SCHEDULE, CIFAR_TIMEOUT,
# RESNET_EPOCHS, RESNET_TIMEOUT, RESNET_AUG, ALEXNET_INITS ("default paper"), PRECISION (fp32 | tf32 | bf16 | bf16_act, bf16
# with --bf16_activations given (the default since 2026-12-05) | bf16_f32act, with --nobf16_activations, for the cifar, resnet and alexnet runs, default fp32; other than fp32 it suffixes their files), ALEXNET_EPOCHS, ALEXNET_TIMEOUT, ZOO_MODELS, ZOO_PEER_MODELS, ZOO_BATCH,
# ZOO_TIMEOUT, ZOO_PEER_TIMEOUT. COMMIT: the tree's full hash (the device machine's copy has
# no git history); every results file names it (scripts/record_commit.py).
set -uo pipefail
OUT=${1:?usage: gpu_experiments.sh OUTDIR [PART...]}
shift
PARTS=${*:-build cifar parallel data zoo resnet alexnet}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
R=$OUT/results
mkdir -p "$R"
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
COMMIT=$(python3 "$ROOT/scripts/record_commit.py" --which)
export COMMIT
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$R/summary.txt"; }
pack() {
  python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$R" > /dev/null
  tar czf "$OUT/results.tgz" -C "$OUT" results 2>/dev/null
}
trap pack EXIT
PRECISION=${PRECISION:-fp32}
SFX=""; [ "$PRECISION" != fp32 ] && SFX="_$PRECISION"
PFLAGS=(--precision="$PRECISION")
[ "$PRECISION" = bf16_act ] && PFLAGS=(--precision=bf16 --bf16_activations)
[ "$PRECISION" = bf16_f32act ] && PFLAGS=(--precision=bf16 --nobf16_activations)
{ date -u; nvidia-smi; echo "commit: $COMMIT"; } > "$R/environment.txt" 2>&1

for part in $PARTS; do
  t0=$(date +%s)
  case $part in
  build)
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCOLONNADE_CUDA=ON "${PREFIX[@]}" > "$R/build.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" >> "$R/build.log" 2>&1
    rc=$?
    say "build rc=$rc"
    [ $rc -eq 0 ] || { grep -E "error" "$R/build.log" | head -20; exit 1; }
    ;;
  cifar)
    EPOCHS=${CIFAR_EPOCHS:-80}
    # On the time limit the trainer gets SIGTERM: it checkpoints and exits 75.
    timeout -s TERM "${CIFAR_TIMEOUT:-400}" "$BUILD/trainer" --model=cifar10-18pct --device=cuda --data="$ROOT/.gpu_data/cifar10/train" \
      --val_data="$ROOT/.gpu_data/cifar10/test" --epochs="$EPOCHS" --mirror \
      --lr_schedule="${CIFAR_SCHEDULE:-multistep:60,70}" --eval_every=1950 --log_every=390 \
      --data_threads=12 "${PFLAGS[@]}" --metrics_file="$R/cifar10_18pct$SFX.jsonl" \
      --checkpoint_dir="$R/ckpt18" --keep_checkpoints=1 > "$R/cifar10_18pct$SFX.log" 2>&1
    say "cifar10-18pct $PRECISION rc=$? $(grep '^eval' "$R/cifar10_18pct$SFX.log" | tail -n 1)"
    rm -rf "$R/ckpt18"
    ;;
  parallel)
    STEPS=10 BATCH=128 bash "$ROOT/tests/parallel/h200_parallel.sh" "$BUILD" "$R/parallel" \
      > "$R/parallel.log" 2>&1
    say "parallel rc=$?"; tail -n 25 "$R/parallel/summary.txt" >> "$R/summary.txt"
    ;;
  data)
    BENCH_DATA="$BUILD/bench_data" bash "$ROOT/scripts/data_bench.sh" "$R/data" > "$R/data.log" 2>&1
    say "data bench rc=$?"; tail -n 20 "$R/data/output.txt" >> "$R/summary.txt" 2>/dev/null
    ;;
  zoo)
    for m in ${ZOO_MODELS:-zfnet vgg16 googlenet resnet18 resnet50 resnet152}; do
      timeout "${ZOO_TIMEOUT:-120}" "$BUILD/bench_train" --model="$m" --batch_sizes="${ZOO_BATCH:-64}" --steps=10 \
        --warmup=3 --breakdown=false --json="$R/zoo_ours.jsonl" > "$R/zoo_$m.log" 2>&1
      say "zoo $m rc=$? $(tail -n 1 "$R/zoo_ours.jsonl" 2>/dev/null)"
    done
    timeout "${ZOO_PEER_TIMEOUT:-300}" python3 "$ROOT/experiments/zoo/torchvision_step.py" \
      --batch "${ZOO_BATCH:-64}" --models "${ZOO_PEER_MODELS:-vgg16,googlenet,resnet18,resnet50,resnet152}" \
      --json "$R/zoo_torchvision.jsonl" \
      > "$R/zoo_torchvision.log" 2>&1
    say "zoo torchvision rc=$?"; cat "$R/zoo_torchvision.jsonl" >> "$R/summary.txt" 2>/dev/null
    ;;
  resnet)
    # 55 epochs take 7 min 19 s on an H200 (experiments/cifar10/README.md).
    # shellcheck disable=SC2086  # RESNET_AUG is a list of flags
    timeout -s TERM "${RESNET_TIMEOUT:-545}" "$BUILD/trainer" --model=resnet18-cifar --device=cuda --data="$ROOT/.gpu_data/cifar10/train" \
      --val_data="$ROOT/.gpu_data/cifar10/test" --epochs="${RESNET_EPOCHS:-55}" --mirror \
      ${RESNET_AUG:---pad=4} --eval_every=390 --log_every=390 --data_threads=14 \
      "${PFLAGS[@]}" --metrics_file="$R/resnet18_cifar$SFX.jsonl" \
      > "$R/resnet18_cifar$SFX.log" 2>&1
    say "resnet18-cifar $PRECISION rc=$? $(grep '^eval' "$R/resnet18_cifar$SFX.log" | tail -n 1)"
    ;;
  alexnet)
    for v in ${ALEXNET_INITS:-default paper}; do
      extra=(); [ "$v" = paper ] && extra=(--paper_init)
      timeout -s TERM "${ALEXNET_TIMEOUT:-150}" "$BUILD/trainer" --model=alexnet --device=cuda \
        --data="$ROOT/.gpu_data/inet/train" --val_data="$ROOT/.gpu_data/inet/val" \
        --epochs="${ALEXNET_EPOCHS:-90}" --mirror --pad=16 --eval_every=135 --log_every=27 \
        --data_threads=14 "${extra[@]}" "${PFLAGS[@]}" \
        --metrics_file="$R/alexnet_init_$v$SFX.jsonl" > "$R/alexnet_init_$v$SFX.log" 2>&1
      say "alexnet init=$v $PRECISION rc=$? $(grep '^eval' "$R/alexnet_init_$v$SFX.log" | tail -n 1)"
    done
    ;;
  *) say "unknown part $part" ;;
  esac
  say "$part took $(( $(date +%s) - t0 )) s"
done
cat "$R/summary.txt"
