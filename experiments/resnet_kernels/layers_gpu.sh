#!/usr/bin/env bash
# Per-layer timings of convolution configurations on the device: bench_layers of binary VER
# (.gpu_bin/VER, carried as in device_env.sh) for each "model:batch" of MODELS, bf16, the
# configurations CONFIGS forced one after another, cuDNN (NCHW, NHWC) beside them; one CSV and
# one log per model under OUTDIR (CUDNN=false leaves cuDNN out; LAYERS_TIMEOUT, default 200 s,
# bounds each model). Then, if STEPS is set, bench_train's step of each model with
# each "binary@COLONNADE_CONV_CONFIG" of STEPS (auto: the automatic choice).
#   VER=ws CONFIGS=wgmma_128x256x64_4,wgmma_ws_128x256x64_4 MODELS="resnet50:128 vgg16:64" \
#     STEPS="after@auto ws@auto ws@wgmma_ws_128x256x64_4" experiments/resnet_kernels/layers_gpu.sh OUT
set -uo pipefail
OUT=${1:?usage: layers_gpu.sh OUTDIR}
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
say "device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
VER=${VER:-ws}
for mb in ${MODELS:-resnet50:128}; do
  m=${mb%:*} b=${mb#*:}
  timeout "${LAYERS_TIMEOUT:-200}" "$B/$VER/bench_layers" --model="$m" --precision=bf16 \
    --batch_sizes="$b" --conv_configs="${CONFIGS:?}" --iters=10 --cudnn="${CUDNN:-true}" \
    --csv="$OUT/layers_${m}_b$b.csv" \
    > "$OUT/layers_${m}_b$b.log" 2>&1
  say "bench_layers $m b$b rc=$?"
done
for round in 1 2; do
  for mb in ${MODELS:-resnet50:128}; do
    m=${mb%:*} b=${mb#*:}
    for s in ${STEPS:-}; do
      v=${s%%@*} cfg=${s#*@}
      log=$OUT/step_${m}_b${b}_${v}_${cfg}_r$round.log
      COLONNADE_CONV_CONFIG=$cfg timeout 200 "$B/$v/bench_train" --model="$m" --precision=bf16 \
        --batch_sizes="$b" --steps=20 > "$log" 2>&1
      say "$m b$b $v $cfg round $round rc=$?: $(grep -oE '[0-9]+ img/s \([0-9.]+ ms/step' "$log" | head -1)"
    done
  done
done
