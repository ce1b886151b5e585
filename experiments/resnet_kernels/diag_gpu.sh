#!/usr/bin/env bash
# What bounds the convolutions (issue 34's 3 x 3 layers and M = 64 GEMMs), in one device call:
# this checkout built (or .gpu_src/new.tar.xz where carried), then ncu_details.sh on one
# VGG-16 batch 64 step (every wgmma kernel: forward, backward data, backward filter of the 13
# convolutions) and on ResNet-50 batch 128 (its first COUNT_R50 wgmma kernels: the forward's
# 53 convolutions and the backward's last layers), and the per-layer bench_layers of both
# models (the automatic choice and the cp.async 128 x 256 forced; no cuDNN). Tables:
# ncu_details_table.py.
#   experiments/resnet_kernels/diag_gpu.sh OUTDIR          # carry .deps (and .gpu_src)
set -uo pipefail
OUT=${1:?usage: diag_gpu.sh OUTDIR}
E=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
src=$ROOT
if [ -f "$ROOT/.gpu_src/new.tar.xz" ]; then
  rm -rf /tmp/new && mkdir -p /tmp/new && tar xJf "$ROOT/.gpu_src/new.tar.xz" -C /tmp/new
  src=/tmp/new
fi
[ -x "$B/new/bench_train" ] || SRC=$src "$E/build_gpu.sh" "$OUT" new || exit 1
rm -f "$OUT"/build_*.log
t0=$(date +%s)
COUNT=45 NCU_TIMEOUT=200 "$E/ncu_details.sh" "$OUT" vgg16 64 >> "$OUT/summary.txt" 2>&1
say "vgg16 details in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
COUNT=${COUNT_R50:-70} NCU_TIMEOUT=200 "$E/ncu_details.sh" "$OUT" resnet50 128 >> "$OUT/summary.txt" 2>&1
say "resnet50 details in $(( $(date +%s) - t0 )) s"
for m in vgg16:64 resnet50:128; do
  timeout 100 "$B/new/bench_layers" --model="${m%:*}" --batch_sizes="${m#*:}" --precision=bf16 \
    --cudnn=false --iters=10 --conv_configs=wgmma_128x256x64_4 --csv="$OUT/layers_${m%:*}.csv" > /dev/null 2>&1
  say "bench_layers ${m%:*} rc=$?"
done
