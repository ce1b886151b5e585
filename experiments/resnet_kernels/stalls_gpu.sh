#!/usr/bin/env bash
# One device call with binaries built here and carried (.gpu_bin/pack/*.tar.xz holding
# new/bench_train and, optionally, new/cuda_tests and base/bench_train; sm_90a; no build on
# the device; pack_local.sh builds and packs them): the GPU suites of TEST_TREES (default new)
# where carried, bench_train of TREES (default new; "base new" with COMMIT_BASE; another
# tree's commit in COMMIT_<tree>) alternately on the headline jobs, two rounds, the compiled
# PyTorch peer of ResNet-50 batch 128 in the same call, then ncu_details.sh's PAGES (default
# raw: each stall reason per issued instruction, each pipe's share of cycles) of MODELS' wgmma
# kernels (default "vgg16:64:38 resnet50:128:45", model:batch:kernels; MODELS= none). ROUNDS,
# JOBS_AB (model:batch list) and NO_PEER=1 shorten the call.
#   COMMIT_NEW=$(git rev-parse HEAD) experiments/resnet_kernels/stalls_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: stalls_gpu.sh OUTDIR}
E=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
# TEST_TREES (default new): the carried trees whose GPU suites run, where they hold cuda_tests.
tests=()
for t in ${TEST_TREES:-new}; do [ -x "$B/$t/cuda_tests" ] && tests+=("$t"); done
skip_tests=1
[ ${#tests[@]} -gt 0 ] && skip_tests=
TREES=${TREES:-new} TEST_TREE="${tests[*]}" SKIP_TESTS=$skip_tests ROUNDS=${ROUNDS:-2} SKIP_TF32=1 \
  SKIP_PEER=1 COMMIT_new="${COMMIT_NEW:?full commit}" COMMIT_base="${COMMIT_BASE:-}" \
  JOBS="${JOBS_AB:-resnet50:128 resnet50:256 vgg16:64 resnet152:64 googlenet:64 alexnet:256}" \
  "$E/run_gpu.sh" "$OUT"
if [ -z "${NO_PEER:-}" ]; then
  timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 \
    --batch 128 --modes bf16_compile --json "$OUT/peer.jsonl" > "$OUT/peer.log" 2>&1
  say "peer resnet50 b128 bf16_compile rc=$?: $(tail -c 300 "$OUT/peer.jsonl" 2> /dev/null)"
fi
for m in ${MODELS-vgg16:64:38 resnet50:128:45}; do
  IFS=: read -r model batch count <<< "$m"
  PAGES=${PAGES:-raw} COUNT=$count NCU_TIMEOUT=150 "$E/ncu_details.sh" "$OUT" "$model" "$batch" \
    >> "$OUT/summary.txt" 2>&1
done
rm -f "$OUT/ncu_details.err"
