#!/usr/bin/env bash
# One device call with binaries built here and carried (.gpu_bin/pack/new.tar.xz holding
# new/bench_train, sm_90a; no build on the device): bench_train on the headline jobs, two
# rounds, the compiled PyTorch peer of ResNet-50 batch 128 in the same call, then the raw
# warp-state and pipe metrics of VGG-16's and ResNet-50's wgmma kernels (ncu_details.sh,
# PAGES=raw: each stall reason per issued instruction, each pipe's share of cycles).
#   COMMIT_NEW=$(git rev-parse HEAD) experiments/resnet_kernels/stalls_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: stalls_gpu.sh OUTDIR}
E=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
TREES=new SKIP_TESTS=1 ROUNDS=2 SKIP_TF32=1 SKIP_PEER=1 COMMIT_new="${COMMIT_NEW:?full commit}" \
  JOBS="resnet50:128 resnet50:256 vgg16:64 resnet152:64 googlenet:64 alexnet:256" \
  "$E/run_gpu.sh" "$OUT"
timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
  --modes bf16_compile --json "$OUT/peer.jsonl" > "$OUT/peer.log" 2>&1
say "peer resnet50 b128 bf16_compile rc=$?: $(tail -c 300 "$OUT/peer.jsonl" 2> /dev/null)"
PAGES=raw COUNT=38 NCU_TIMEOUT=150 "$E/ncu_details.sh" "$OUT" vgg16 64 >> "$OUT/summary.txt" 2>&1
PAGES=raw COUNT=45 NCU_TIMEOUT=150 "$E/ncu_details.sh" "$OUT" resnet50 128 >> "$OUT/summary.txt" 2>&1
rm -f "$OUT/ncu_details.err"
