#!/usr/bin/env bash
# The call that times what the late evening of 2026-12-06 built and could not run (no device
# that session; README.md, "Fewer passes in the backward"), in one device call of at most 600 s,
# the most needed first so that a call cut short still brings them:
#   1. this checkout built on the device (build_gpu.sh, into .gpu_bin/new),
#   2. its whole GPU suite and bench_train of the carried after/ (c6d9e55) against new on the
#      headline jobs, one round (run_gpu.sh),
#   3. the compiled PyTorch peer of ResNet-50 batch 128 (same call),
#   4. the breakdowns of new's ResNet-50 and VGG-16 steps, ResNet-50 at batch 128 / 256 with
#      --recompute=off,
#   5. bench_layers of ResNet-50 with the forced tiles until DEADLINE s after the start (default
#      430): cp.async 128 x 256 against the TMA tiles, the persistent one and the 64 x 256 one.
# COMMIT_NEW: this checkout's full commit (git on the device names a stale HEAD).
#   COMMIT_NEW=$(git rev-parse HEAD) experiments/resnet_kernels/next_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: next_gpu.sh OUTDIR}
T0=$(date +%s)
E=$(dirname "$0")
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
"$E/build_gpu.sh" "$OUT" new || exit 1
rm -f "$OUT/build_new.log"  # (8 files come back from a call)
# after/ (c6d9e55) comes in .gpu_bin/pack/bins.tar.xz when carried; without it, new alone.
trees=new
[ -x "$B/after/bench_train" ] && trees="after new"
TREES="$trees" TEST_TREE=new ROUNDS=1 SKIP_TF32=1 SKIP_PEER=1 \
  JOBS="resnet50:128 resnet50:256 vgg16:64 googlenet:64 alexnet:256 resnet152:64" \
  COMMIT_after=c6d9e55af9e048a4d951aad40f99a81def3168b1 COMMIT_new="${COMMIT_NEW:?full commit}" \
  "$E/run_gpu.sh" "$OUT"
timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
  --modes bf16_compile --json "$OUT/peer.jsonl" > "$OUT/peer.log" 2>&1
say "peer resnet50 b128 bf16_compile rc=$?: $(tail -c 300 "$OUT/peer.jsonl" 2> /dev/null)"
mkdir -p "$OUT/extra"  # (tarred at the end: 8 files come back from a call)
mv "$OUT/peer.log" "$OUT/extra/"
timeout 60 "$B/new/bench_train" --model=resnet50 --precision=bf16 --batch_sizes=128 --steps=20 \
  --breakdown > "$OUT/extra/breakdown_resnet50_new.log" 2>&1
timeout 60 "$B/new/bench_train" --model=vgg16 --precision=bf16 --batch_sizes=64 --steps=20 \
  --breakdown > "$OUT/extra/breakdown_vgg16_new.log" 2>&1
# The default --recompute=bn_relu writes 32 batch-norm outputs again in the backward; what
# keeping them costs in memory and saves in time (the peer's peak is the bound, README).
for b in 128 256; do
  timeout 60 "$B/new/bench_train" --model=resnet50 --precision=bf16 --batch_sizes=$b --steps=30 \
    --breakdown=false --recompute=off > "$OUT/extra/recompute_off_b$b.log" 2>&1
  say "new resnet50 b$b recompute=off: $(grep -oE "[0-9]+ img/s|peak device memory [0-9.]+ GiB" \
    "$OUT/extra/recompute_off_b$b.log" | head -2 | tr '\n' ' ')"
done
left=$(( ${DEADLINE:-430} - $(date +%s) + T0 ))  # (layers_gpu.sh's summary lines: extra/)
say "bench_layers gets ${left} s"
if [ "$left" -gt 20 ]; then
  CUDNN=false VER=new MODELS="resnet50:128" LAYERS_TIMEOUT=$left \
    CONFIGS=wgmma_128x256x64_4,wgmma_tma_128x256x64_4,wgmma_tma_128x128x64_6,wgmma_tma_persistent_128x128x64_4,wgmma_tma_64x256x64_5 \
    "$E/layers_gpu.sh" "$OUT/extra"
fi
tar czf "$OUT/extra.tgz" -C "$OUT" extra && rm -rf "$OUT/extra"
