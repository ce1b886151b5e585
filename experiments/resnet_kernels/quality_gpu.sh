#!/usr/bin/env bash
# Issue 34 point 5 in device calls, with the trainer built here and carried
# (.gpu_data/qbin/qbin.tar.xz; prepare_quality_data.sh makes it and the data), PARTS (default
# "e2e cifar alexnet"). The 64 MiB a call carries hold one part's data with the tracked tree:
# cifar with .deps, .gpu_data/qbin and .gpu_data/q; then, on the same warm machine (the
# trainer stays unpacked), alexnet with .deps and .gpu_data/inet (50 MB: no room for qbin);
# e2e with .deps and .gpu_data/imagenette-small/train (and qbin where the machine is fresh):
#   e2e      the trainer's ResNet-50, batch 128, default flags plus --random_resized_crop, on
#            the Imagenette shard (.gpu_data/imagenette-small/train, 9,469 JPEGs at 128 px),
#            against the same trainer on --data=synthetic at 128 px (its bare step; the
#            trainer refuses crops larger than the images);
#   cifar    resnet18-cifar, bf16, 55 epochs, the recipe of experiments/cifar10, on CIFAR-10
#            JPEG shards (.gpu_data/q/cif_shards.tar.gz: make_shards --source=folder
#            --encoding=jpeg --jpeg_passthrough from the shared cifar10-jpeg folders); the last
#            epoch's test error against the issue's bar of 10%;
#   alexnet  AlexNet on the Imagenette subset of experiments/alexnet_init (.gpu_data/inet:
#            the first 350 training and 120 validation images of each class of the shared
#            imagenette-224, make_shards --source=folder --encoding=jpeg), 90 epochs, FP32 and
#            bf16 (the default) in the same call; the bar: bf16 within 1 point of FP32.
#   COMMIT=$(git rev-parse HEAD) PARTS="e2e cifar" experiments/resnet_kernels/quality_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: quality_gpu.sh OUTDIR}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
W=/tmp/q
mkdir -p "$W"
# The trainer: from the carried pack, else the one an earlier call on this warm machine
# unpacked (the carry limit: the AlexNet subset's shards alone are 50 MB).
if [ -f "$ROOT/.gpu_data/qbin/qbin.tar.xz" ]; then
  tar xJf "$ROOT/.gpu_data/qbin/qbin.tar.xz" -C "$W"
elif [ ! -x "$W/qbin/trainer" ]; then
  say "no trainer: carry .gpu_data/qbin (or run after a call that did, on the same warm machine)"
  exit 2
fi
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${COMMIT:-?}"

for part in ${PARTS:-e2e cifar alexnet}; do
  case $part in
  e2e)
    # The same trainer on generated data of the shard's size: its bare step.
    for data in jpeg synthetic; do
      flags=(--data="$ROOT/.gpu_data/imagenette-small/train" --random_resized_crop)
      [ "$data" = synthetic ] && flags=(--data=synthetic --input_size=128)
      timeout 150 "$W/qbin/trainer" --model=resnet50 --device=cuda --batch_size=128 "${flags[@]}" \
        --steps=400 --log_every=50 --data_threads=14 > "$OUT/trainer_resnet50_$data.log" 2>&1
      say "trainer $data rc=$?: $(grep -E '^step +400/' "$OUT/trainer_resnet50_$data.log" | head -1)"
    done
    ;;
  cifar)
    tar xzf "$ROOT/.gpu_data/q/cif_shards.tar.gz" -C "$W"
    timeout 300 "$W/qbin/trainer" --model=resnet18-cifar --device=cuda --precision=bf16 \
      --data="$W/cif_shards/train" --val_data="$W/cif_shards/test" --epochs=55 --mirror --pad=4 \
      --eval_every=390 --log_every=390 --data_threads=14 \
      --metrics_file="$OUT/resnet18_cifar_bf16.jsonl" > "$OUT/resnet18_cifar_bf16.log" 2>&1
    say "resnet18-cifar rc=$?: $(grep -E '^eval' "$OUT/resnet18_cifar_bf16.log" | tail -1)"
    ;;
  alexnet)
    for prec in fp32 bf16; do
      t0=$(date +%s)
      timeout 200 "$W/qbin/trainer" --model=alexnet --device=cuda --precision="$prec" \
        --data="$ROOT/.gpu_data/inet/train" --val_data="$ROOT/.gpu_data/inet/val" --epochs=90 \
        --mirror --pad=16 --eval_every=135 --log_every=27 --data_threads=14 \
        --metrics_file="$OUT/alexnet_imagenette_$prec.jsonl" > "$OUT/alexnet_imagenette_$prec.log" 2>&1
      say "alexnet $prec rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E '^eval' "$OUT/alexnet_imagenette_$prec.log" | tail -1)"
    done
    ;;
  *) say "unknown part $part" ;;
  esac
done
