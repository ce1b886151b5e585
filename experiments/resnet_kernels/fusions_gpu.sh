#!/usr/bin/env bash
# add_bn_sums timed with 12950ae's kernel (operand count a template argument), in one device
# call: this checkout built on the device, its GPU suite, then ResNet-50 b128 / b256 bf16 with
# --fusions=default against --fusions=all, alternately for ROUNDS rounds (default 3), each
# with its breakdown in the last round, and the compiled PyTorch peer of b128 in the same call.
#   COMMIT_NEW=$(git rev-parse HEAD) experiments/resnet_kernels/fusions_gpu.sh OUTDIR
set -uo pipefail
OUT=${1:?usage: fusions_gpu.sh OUTDIR}
E=$(dirname "$0")
mkdir -p "$OUT/extra"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
"$E/build_gpu.sh" "$OUT" new || exit 1
rm -f "$OUT/build_new.log"
TREES=new TEST_TREE=new ROUNDS=0 SKIP_TF32=1 SKIP_PEER=1 JOBS="" \
  COMMIT_new="${COMMIT_NEW:?full commit}" "$E/run_gpu.sh" "$OUT"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for ((r = 0; r < ${ROUNDS:-3}; ++r)); do
  for b in 128 256; do
    for f in default all; do
      log=$OUT/extra/resnet50_b${b}_${f}_r$r.log
      timeout 90 "$B/new/bench_train" --model=resnet50 --precision=bf16 --batch_sizes=$b \
        --steps=30 --breakdown=false --fusions=$f > "$log" 2>&1
      ips=$(grep -oE "[0-9]+ img/s" "$log" | head -1 | grep -oE "^[0-9]+")
      say "resnet50 b$b fusions=$f round $r: ${ips:-?} img/s"
      printf '{"impl":"colonnade","commit":"%s","model":"resnet50","batch":%s,"mode":"bf16","fusions":"%s","round":%s,"img_s":%s,"device":"%s"}\n' \
        "$COMMIT_NEW" "$b" "$f" "$r" "${ips:-null}" "$DEV" >> "$OUT/fusions.jsonl"
    done
  done
done
for f in default all; do
  timeout 60 "$B/new/bench_train" --model=resnet50 --precision=bf16 --batch_sizes=128 --steps=20 \
    --breakdown --fusions=$f > "$OUT/extra/breakdown_resnet50_$f.log" 2>&1
done
timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
  --modes bf16_compile --json "$OUT/peer.jsonl" > "$OUT/extra/peer.log" 2>&1
say "peer resnet50 b128 bf16_compile rc=$?: $(tail -c 300 "$OUT/peer.jsonl" 2> /dev/null)"
tar czf "$OUT/extra.tgz" -C "$OUT" extra && rm -rf "$OUT/extra"
