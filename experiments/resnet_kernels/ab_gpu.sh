#!/usr/bin/env bash
# This checkout (new) against a baseline tree (base) in one device call, the most needed first:
#   1. both built on the device at once (build_gpu.sh; base from .gpu_src/base.tar.xz, a
#      `git archive` of COMMIT_BASE, carried; new from .gpu_src/new.tar.xz likewise if there),
#   2. new's whole GPU suite, then bench_train base / new alternately on JOBS, ROUNDS rounds
#      (run_gpu.sh: results.jsonl, summary.txt),
#   3. the compiled PyTorch peer of ResNet-50 batch 128 (same call: the ratio's denominator),
#   4. new's ResNet-50 and VGG-16 breakdowns, and one ResNet-50 batch 128 step of each tree
#      (NCU_TREES) under Nsight Compute (ncu_step.sh: per-kernel durations, kernel_table.py).
# SKIP_PEER=1 leaves out 3; ROUNDS (default 2), JOBS_AB (model:batch list) shorten 2.
#   mkdir -p .gpu_src && git archive --format=tar BASE | xz > .gpu_src/base.tar.xz
#   COMMIT_NEW=$(git rev-parse HEAD) COMMIT_BASE=$(git rev-parse BASE) \
#     experiments/resnet_kernels/ab_gpu.sh OUTDIR          # carry .deps and .gpu_src
set -uo pipefail
OUT=${1:?usage: ab_gpu.sh OUTDIR}
E=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# shellcheck source=/dev/null  # device_env.sh beside this script (linted on its own)
source "$E/device_env.sh"
rm -rf /tmp/base && mkdir -p /tmp/base && tar xJf "$ROOT/.gpu_src/base.tar.xz" -C /tmp/base
# new: this checkout, or .gpu_src/new.tar.xz where carried (a commit's tree, whatever the
# working tree holds while the call waits for a machine).
new_src=$ROOT
if [ -f "$ROOT/.gpu_src/new.tar.xz" ]; then
  rm -rf /tmp/new && mkdir -p /tmp/new && tar xJf "$ROOT/.gpu_src/new.tar.xz" -C /tmp/new
  new_src=/tmp/new
fi
# EXTRA: more trees, each from .gpu_src/NAME.tar.xz (COMMIT_NAME its commit), built beside
# the two, timed with them, and their GPU suites run after new's.
pids=()
for t in ${EXTRA:-}; do
  rm -rf "/tmp/$t" && mkdir -p "/tmp/$t" && tar xJf "$ROOT/.gpu_src/$t.tar.xz" -C "/tmp/$t"
  SRC=/tmp/$t JOBS=5 "$E/build_gpu.sh" "$OUT" "$t" &
  pids+=($!)
done
SRC=$new_src JOBS=8 "$E/build_gpu.sh" "$OUT" new &
pids+=($!)
SRC=/tmp/base JOBS=8 "$E/build_gpu.sh" "$OUT" base || exit 1
for pid in "${pids[@]}"; do wait "$pid" || exit 1; done
rm -f "$OUT"/build_*.log  # (8 files come back from a call)
TREES="base new ${EXTRA:-}" TEST_TREE="new ${EXTRA:-}" ROUNDS="${ROUNDS:-2}" SKIP_TF32=1 SKIP_PEER=1 \
  JOBS="${JOBS_AB:-resnet50:128 resnet50:256 vgg16:64 resnet152:64 googlenet:64 alexnet:256}" \
  COMMIT_base="${COMMIT_BASE:?full commit}" COMMIT_new="${COMMIT_NEW:?full commit}" \
  "$E/run_gpu.sh" "$OUT"
mkdir -p "$OUT/extra"  # (tarred at the end: 8 files come back from a call)
if [ -z "${SKIP_PEER:-}" ]; then
  timeout 200 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
    --modes bf16_compile --json "$OUT/peer.jsonl" > "$OUT/extra/peer.log" 2>&1
  say "peer resnet50 b128 bf16_compile rc=$?: $(tail -c 300 "$OUT/peer.jsonl" 2> /dev/null)"
fi
for m in resnet50:128 vgg16:64; do
  timeout 60 "$B/new/bench_train" --model="${m%:*}" --precision=bf16 --batch_sizes="${m#*:}" \
    --steps=20 --breakdown > "$OUT/extra/breakdown_${m%:*}_new.log" 2>&1
done
for tree in ${NCU_TREES:-base new}; do
  BIN=$tree "$E/ncu_step.sh" "$OUT/extra" resnet50 128 >> "$OUT/summary.txt" 2>&1
  mv "$OUT/extra/resnet50_b128_ncu.csv.gz" "$OUT/extra/resnet50_b128_ncu_$tree.csv.gz" 2> /dev/null
done
tar czf "$OUT/extra.tgz" -C "$OUT" extra && rm -rf "$OUT/extra"
