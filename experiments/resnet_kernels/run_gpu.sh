#!/usr/bin/env bash
# Issue 34's measurements in one device call, with binaries built here and carried
# (.gpu_bin/pack/bins.tar.xz: before/ = the tree before the issue, after/ = this tree; Abseil
# and libjpeg in .deps):
#   1. the whole GPU suite (cuda_tests, 8 gtest shards at once),
#   2. bench_train before / after, alternately, on the zoo's headline jobs (bf16; ResNet-50
#      also TF32 and batch 256),
#   3. the PyTorch peers of the same jobs in the same call (torch.compile default mode, eager
#      bf16 channels_last, TF32), unless SKIP_PEER=1; PEER_SET=core runs only the compiled
#      peers of the headline rows (ResNet-50 batch 128, VGG-16, AlexNet); PEER_SET=extra the compiled
#      peers the default set leaves out (ResNet-50 batch 64, ResNet-152, GoogLeNet) and
#      max-autotune on ResNet-50 batch 128 (AUTOTUNE_TIMEOUT s, default 240, for compiling and
#      timing).
# TREES (default "before after"): the binary folders bench_train runs, COMMIT_<tree> their
# full commits; ROUNDS (default 2); SKIP_TF32=1 leaves out the TF32 runs; TEST_TREE (default
# after): the trees whose cuda_tests run, one after another; SKIP_TESTS=1 runs none.
# Everything lands in OUTDIR/results.jsonl (one line per run: impl, tree, model, batch, mode,
# img/s, peak GiB, device) and the logs in OUTDIR/logs.tgz.
#   COMMIT=$(git rev-parse HEAD) BEFORE_COMMIT=$(git rev-parse <before>) \
#     experiments/resnet_kernels/run_gpu.sh OUTDIR   (full hashes: scripts/check_results.sh)
set -uo pipefail
OUT=${1:?usage: run_gpu.sh OUTDIR}
mkdir -p "$OUT/logs"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$(dirname "$0")/device_env.sh"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "device $DEV; after ${COMMIT:-?}, before ${BEFORE_COMMIT:-?}"

for tt in ${TEST_TREE:-after}; do
  [ -z "${SKIP_TESTS:-}" ] || break
  t0=$(date +%s)
  pids=()
  for ((i = 0; i < 8; ++i)); do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i timeout 400 "$B/$tt/cuda_tests" --gtest_brief=1 \
      > "$OUT/logs/tests.$tt.$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  pass=0 skip=0
  for f in "$OUT/logs/tests.$tt".*.log; do
    n=$(grep -oE "\[  PASSED  \] [0-9]+" "$f" | grep -oE "[0-9]+$" | head -1); pass=$((pass + ${n:-0}))
    n=$(grep -oE "\[  SKIPPED \] [0-9]+" "$f" | grep -oE "[0-9]+$" | head -1); skip=$((skip + ${n:-0}))
  done
  fail=$(cat "$OUT/logs/tests.$tt".*.log | grep -cE "^\[  FAILED  \] [A-Za-z]")
  say "cuda_tests $tt rc=$rc in $(( $(date +%s) - t0 )) s: $pass passed, $fail failed, $skip skipped"
  cat "$OUT/logs/tests.$tt".*.log | grep -E "^\[  FAILED  \] [A-Za-z]" | sort -u | head -20 >&2
done

: > "$OUT/results.jsonl"
# A tree's full commit: COMMIT_<tree> (e.g. COMMIT_new), else COMMIT for after and
# BEFORE_COMMIT for before.
commit_of() {
  local var=COMMIT_$1
  if [ -n "${!var:-}" ]; then echo "${!var}"
  elif [ "$1" = after ]; then echo "${COMMIT:-}"
  elif [ "$1" = before ]; then echo "${BEFORE_COMMIT:-}"
  fi
}
ours() {  # tree model batch precision
  local v=$1 m=$2 b=$3 prec=$4 log
  log=$OUT/logs/${v}_${m}_b${b}_${prec}.log
  timeout 300 "$B/$v/bench_train" --model="$m" --precision="$prec" --batch_sizes="$b" --steps=30 \
    --breakdown=false > "$log" 2>&1
  local line ips peak
  line=$(grep -E "img/s \(" "$log" | head -1)
  ips=$(grep -oE "[0-9]+ img/s" <<< "$line" | head -1 | grep -oE "^[0-9]+")
  peak=$(grep -oE "peak device memory [0-9.]+ GiB" <<< "$line" | grep -oE "[0-9.]+")
  say "ours $v $m b$b $prec: ${ips:-?} img/s, peak ${peak:-?} GiB"
  printf '{"impl":"colonnade","tree":"%s","commit":"%s","model":"%s","batch":%s,"mode":"%s","img_s":%s,"peak_gib":%s,"device":"%s"}\n' \
    "$v" "$(commit_of "$v")" "$m" "$b" "$prec" \
    "${ips:-null}" "${peak:-null}" "$DEV" >> "$OUT/results.jsonl"
}
JOBS=${JOBS:-"alexnet:256 resnet50:128 resnet50:256 resnet50:64 resnet152:64 vgg16:64 googlenet:64"}
for ((r = 0; r < ${ROUNDS:-2}; ++r)); do  # two rounds: drift shows as disagreement
  for j in $JOBS; do
    for v in ${TREES:-before after}; do ours "$v" "${j%:*}" "${j#*:}" bf16; done
  done
done
if [ -z "${SKIP_TF32:-}" ]; then
  ours after resnet50 128 tf32
  ours before resnet50 128 tf32
  ours after vgg16 64 tf32
fi

if [ -z "${SKIP_PEER:-}" ] && [ "${PEER_SET:-default}" = core ]; then
  P=$OUT/peer.jsonl
  for mb in resnet50:128 vgg16:64; do
    timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models "${mb%:*}" \
      --batch "${mb#*:}" --modes bf16_compile --json "$P" >> "$OUT/logs/peer.log" 2>&1
    say "peer $mb bf16_compile rc=$?"
  done
  timeout 200 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" --batch_sizes=256 \
    --modes=bf16_compile --json="$OUT/peer_alexnet.json" >> "$OUT/logs/peer.log" 2>&1
  say "peer alexnet bf16_compile rc=$?"
fi
if [ -z "${SKIP_PEER:-}" ] && [ "${PEER_SET:-default}" = extra ]; then
  P=$OUT/peer.jsonl
  for mb in resnet50:64 resnet152:64 googlenet:64; do
    timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models "${mb%:*}" \
      --batch "${mb#*:}" --modes bf16_compile --json "$P" >> "$OUT/logs/peer.log" 2>&1
    say "peer $mb bf16_compile rc=$?"
  done
  timeout "${AUTOTUNE_TIMEOUT:-240}" python3 "$ROOT/experiments/zoo/torchvision_step.py" \
    --models resnet50 --batch 128 --modes bf16_autotune --json "$P" >> "$OUT/logs/peer.log" 2>&1
  say "peer resnet50 b128 bf16_autotune rc=$? (124: did not finish within ${AUTOTUNE_TIMEOUT:-240} s)"
fi
if [ -z "${SKIP_PEER:-}" ] && [ "${PEER_SET:-default}" = default ]; then
  t0=$(date +%s)
  P=$OUT/peer.jsonl
  timeout 200 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" --batch_sizes=256 \
    --modes=bf16_compile --json="$OUT/peer_alexnet.json" > "$OUT/logs/peer.log" 2>&1
  say "peer alexnet bf16_compile rc=$?"
  timeout 300 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
    --modes bf16_compile,bf16_cl,tf32 --json "$P" >> "$OUT/logs/peer.log" 2>&1
  say "peer resnet50 b128 rc=$?"
  timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 256 \
    --modes bf16_compile --json "$P" >> "$OUT/logs/peer.log" 2>&1
  say "peer resnet50 b256 rc=$?"
  timeout 240 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models vgg16,googlenet,resnet152 \
    --batch 64 --modes bf16_cl --json "$P" >> "$OUT/logs/peer.log" 2>&1
  say "peer vgg16,googlenet,resnet152 b64 bf16_cl rc=$?"
  timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models vgg16 --batch 64 \
    --modes bf16_compile,tf32 --json "$P" >> "$OUT/logs/peer.log" 2>&1
  say "peer vgg16 compile, tf32 rc=$? (peers in $(( $(date +%s) - t0 )) s)"
fi
if [ -z "${SKIP_PEER:-}" ]; then
  python3 - "$OUT" "$DEV" "${COMMIT:-}" >> "$OUT/results.jsonl" <<'PY'
import json, os, sys
out, dev, commit = sys.argv[1:4]
for f in ("peer_alexnet.json", "peer.jsonl"):
    p = os.path.join(out, f)
    if not os.path.exists(p):
        continue
    for line in open(p):
        if line.strip():
            r = json.loads(line)
            r.update({"impl": "pytorch", "device": dev, "commit": commit})
            print(json.dumps(r))
PY
  rm -f "$OUT/peer_alexnet.json" "$OUT/peer.jsonl"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
