#!/usr/bin/env bash
# One GPU call: the issue's benchmark table beyond AlexNet -- bench_train's bare step for
# ResNet-50, VGG-16 and GoogLeNet in fp32, tf32 and bf16 next to the torchvision peer
# (experiments/zoo/torchvision_step.py: fp32, tf32, bf16_cl, and bf16_compile where asked)
# in the same job. Expects a CUDA build in BUILD_DIR (bench_train).
#
#   COMMIT=<full hash> experiments/mixed_precision/run_zoo.sh OUTDIR [BUILD_DIR]
#
# Writes OUTDIR/zoo.jsonl (impl, what, model, mode, batch, img_per_s, peak_mem_bytes,
# commit, device) and the logs. Knobs: CONFIGS ("model:batch ..."), MODES (ours; bf16 stores
# activations in bf16 by default, bf16_f32act: --nobf16_activations, bf16_act: the flag given,
# bf16_wgmma: bf16 with --conv_config=wgmma (the sm_90a convolution kernels, bf16's default
# where they run since 2026-12-05; records of runs on them end in _wgmma), bf16_mma:
# --conv_config=mma),
# PEER_MODES, COMPILE ("model:batch ..." that also get bf16_compile), SKIP_PEER=1.
set -uo pipefail
OUT=${1:?usage: run_zoo.sh OUTDIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$ROOT/build-gpu}
CONFIGS=${CONFIGS:-resnet50:64 resnet50:128 vgg16:64 googlenet:64}
MODES=${MODES:-fp32,tf32,bf16}
PEER_MODES=${PEER_MODES:-fp32,tf32,bf16_cl}
COMPILE=${COMPILE:-resnet50:128}
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
J=$OUT/zoo.jsonl
: > "$J"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for cfg in $CONFIGS; do
  model=${cfg%%:*} batch=${cfg##*:}
  for m in ${MODES//,/ }; do
    flags=(--precision="$m")
    [ "$m" = bf16_act ] && flags=(--precision=bf16 --bf16_activations)
    [ "$m" = bf16_f32act ] && flags=(--precision=bf16 --nobf16_activations)
    [ "$m" = bf16_wgmma ] && flags=(--precision=bf16 --conv_config=wgmma)
    [ "$m" = bf16_mma ] && flags=(--precision=bf16 --conv_config=mma)
    timeout 120 "$BUILD/bench_train" --model="$model" --batch_sizes="$batch" "${flags[@]}" \
      --warmup=3 --steps=10 --breakdown=false --json="$OUT/ours.json" > "$OUT/ours_${model}_${batch}_$m.log" 2>&1
    say "ours $model $batch $m rc=$?: $(grep -E 'img/s' "$OUT/ours_${model}_${batch}_$m.log" | head -1 | cut -c1-90)"
  done
  if [ -z "${SKIP_PEER:-}" ]; then
    modes=$PEER_MODES
    [[ " $COMPILE " == *" $cfg "* ]] && modes="$modes,bf16_compile"
    timeout 300 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models "$model" \
      --batch "$batch" --modes "$modes" --json "$OUT/peer.json" >> "$OUT/peer.log" 2>&1
    say "peer $model $batch ($modes) rc=$?"
  fi
done
python3 - "$OUT" "$COMMIT" "$DEV" >> "$J" <<'PY'
import json, os, sys
out, commit, dev = sys.argv[1:]
def lines(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
for r in lines("ours.json"):
    print(json.dumps({"impl": "colonnade", "what": "bench_train", "model": r["model"],
                      "mode": r["mode"] + ("_act" if r.get("activations") == "bf16" else "")
                              + ("_wgmma" if r.get("wgmma") else ""),
                      "batch": r["batch"], "img_per_s": round(r["img_per_s"], 1),
                      "peak_mem_bytes": r["peak_in_use_bytes"], "commit": commit, "device": dev}))
for r in lines("peer.json"):
    print(json.dumps({"impl": "pytorch", "what": "torchvision_step", "model": r["model"],
                      "mode": r["mode"], "batch": r["batch"], "img_per_s": r["images_per_sec"],
                      "peak_mem_bytes": r["peak_mem_mib"] * 2**20, "commit": commit,
                      "device": dev}))
PY
python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT/summary.txt" > /dev/null 2>&1
say "done: $(wc -l < "$J") records"
