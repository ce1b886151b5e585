#!/usr/bin/env bash
# Issue 34 point 5 in one device call, with the trainer and bench_train built here and carried
# (.gpu_data/q/qbin.tar.xz), the CIFAR-10 JPEG shards (.gpu_data/q/cif_shards.tar.gz: made here
# with make_shards --source=folder --encoding=jpeg --jpeg_passthrough from the shared
# cifar10-jpeg folders) and the Imagenette training shard (.gpu_data/imagenette-small/train,
# 9,469 images at 128 px):
#   1. end to end: the trainer's ResNet-50, batch 128, default flags plus
#      --random_resized_crop (the 128 px JPEGs to 224) on the Imagenette shard, against
#      bench_train's bare step of the same model and batch in the same call;
#   2. quality: resnet18-cifar, bf16, 55 epochs, the recipe of experiments/cifar10 (the last
#      epoch's test error against the issue's bar of 10%).
#   experiments/resnet_kernels/quality_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: quality_gpu.sh OUTDIR}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
W=/tmp/q
mkdir -p "$W"
tar xJf "$ROOT/.gpu_data/q/qbin.tar.xz" -C "$W"
tar xzf "$ROOT/.gpu_data/q/cif_shards.tar.gz" -C "$W"
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${COMMIT:-?}"

timeout 120 "$W/qbin/bench_train" --model=resnet50 --precision=bf16 --batch_sizes=128 --steps=30 \
  --breakdown=false > "$OUT/bare_resnet50.log" 2>&1
say "bare step: $(grep -oE '[0-9]+ img/s \([0-9.]+ ms/step' "$OUT/bare_resnet50.log" | head -1)"
timeout 150 "$W/qbin/trainer" --model=resnet50 --device=cuda --batch_size=128 \
  --data="$ROOT/.gpu_data/imagenette-small/train" --random_resized_crop --steps=400 \
  --log_every=50 --data_threads=14 > "$OUT/trainer_resnet50.log" 2>&1
say "trainer rc=$?: $(grep -E '^step +400/' "$OUT/trainer_resnet50.log" | head -1)"

timeout 300 "$W/qbin/trainer" --model=resnet18-cifar --device=cuda --precision=bf16 \
  --data="$W/cif_shards/train" --val_data="$W/cif_shards/test" --epochs=55 --mirror --pad=4 \
  --eval_every=390 --log_every=390 --data_threads=14 \
  --metrics_file="$OUT/resnet18_cifar_bf16.jsonl" > "$OUT/resnet18_cifar_bf16.log" 2>&1
say "resnet18-cifar rc=$?: $(grep -E '^eval' "$OUT/resnet18_cifar_bf16.log" | tail -1)"
