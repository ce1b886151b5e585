#!/usr/bin/env bash
# Issue 33's GPU acceptance in one device call: the restructured tree against the tree before
# it, on the same card in the same job.
#   1. builds both trees at once (after: every target; before: bench_train only),
#   2. runs the GPU suites (cuda_tests as gtest shards, dev_tests, the trainer's GPU scripts),
#   3. times bench_train (AlexNet batch 256, ResNet-50 batch 128, VGG-16 batch 64; bf16, the
#      default) alternately before / after, twice each, so drift shows as disagreement,
#   4. and, unless SKIP_PEER=1, the PyTorch peers of README's headline rows in the same job.
#
#   COMMIT=<hash> BEFORE_COMMIT=<hash> experiments/house/run_gpu.sh OUTDIR
#
# The before tree comes as .deps/before.tar.gz (`git archive BEFORE_COMMIT | gzip`), Abseil as
# the Debian packages in .deps/ (the device machine has none). OUTDIR gets at most 8 files.
set -uo pipefail
OUT=${1:?usage: run_gpu.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
COMMIT=${COMMIT:-unknown}
BEFORE_COMMIT=${BEFORE_COMMIT:-unknown}
BEFORE=/tmp/colonnade-before
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
: > "$OUT/summary.txt"

if [ ! -d /opt/absl/usr ]; then
  for deb in "$ROOT"/.deps/libabsl*.deb; do dpkg -x "$deb" /opt/absl; done
fi
export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CONF=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DCOLONNADE_CUDA=ON
  -DCOLONNADE_CUDA_EMULATION=OFF -DCMAKE_PREFIX_PATH=/opt/absl/usr)
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "device $DEV; after $COMMIT, before $BEFORE_COMMIT"

t0=$(date +%s)
rm -rf "$BEFORE" && mkdir -p "$BEFORE" && tar xzf "$ROOT/.deps/before.tar.gz" -C "$BEFORE"
{ cmake -S "$ROOT" -B "$ROOT/build-gpu" "${CONF[@]}" && cmake --build "$ROOT/build-gpu" -j11; } \
  > "$OUT/build.log" 2>&1 &
after_pid=$!
{ cmake -S "$BEFORE" -B "$BEFORE/build" "${CONF[@]}" &&
  cmake --build "$BEFORE/build" -j5 --target bench_train; } > "$OUT/build_before.log" 2>&1 &
before_pid=$!
wait $after_pid; a=$?
wait $before_pid; b=$?
say "builds: after rc=$a, before rc=$b in $(( $(date +%s) - t0 )) s"
if [ $a -ne 0 ] || [ $b -ne 0 ]; then
  grep -hE "error" "$OUT/build.log" "$OUT/build_before.log" | head -20 >&2; exit 1
fi
cat "$OUT/build_before.log" >> "$OUT/build.log"; rm -f "$OUT/build_before.log"

if [ -z "${SKIP_TESTS:-}" ]; then
  t0=$(date +%s)
  SHARDS=8
  pids=()
  for ((i = 0; i < SHARDS; ++i)); do
    GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout 300 \
      "$ROOT/build-gpu/tests/cuda/cuda_tests" --gtest_brief=1 > "$OUT/tests.$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  pass=0 fail=0 skip=0
  : > "$OUT/tests.log"
  for ((i = 0; i < SHARDS; ++i)); do
    f=$OUT/tests.$i.log
    n=$(grep -oE "\[  PASSED  \] [0-9]+" "$f" | head -1 | grep -oE "[0-9]+$"); pass=$((pass + ${n:-0}))
    n=$(grep -oE "\[  FAILED  \] [0-9]+ test" "$f" | head -1 | grep -oE "[0-9]+"); fail=$((fail + ${n:-0}))
    n=$(grep -oE "\[  SKIPPED \] [0-9]+ test" "$f" | head -1 | grep -oE "[0-9]+"); skip=$((skip + ${n:-0}))
    { echo "## cuda_tests shard $i of $SHARDS"; cat "$f"; } >> "$OUT/tests.log"; rm -f "$f"
  done
  say "cuda_tests rc=$rc: $pass passed, $fail failed, $skip skipped in $(( $(date +%s) - t0 )) s"
  grep -E "\[  FAILED  \] [A-Za-z]" "$OUT/tests.log" | sort -u | head -20 >&2
  t0=$(date +%s)
  { echo "## dev_tests"; timeout 120 "$ROOT/build-gpu/dev/dev_tests" --gtest_brief=1; } \
    >> "$OUT/tests.log" 2>&1
  say "dev_tests rc=$?: $(grep -E '\[  PASSED  \]' "$OUT/tests.log" | tail -1) in $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  (cd "$ROOT/build-gpu" && timeout 240 ctest -L cuda -E '^(cuda|dev)\.' -j4 --output-on-failure) \
    > "$OUT/app_tests.log" 2>&1
  say "trainer GPU scripts rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'tests passed' "$OUT/app_tests.log")"
  cat "$OUT/app_tests.log" >> "$OUT/tests.log"; rm -f "$OUT/app_tests.log"
fi

# bench_train, before and after alternately: the same card, the same minutes.
t0=$(date +%s)
: > "$OUT/bench.jsonl.tmp"
for round in 1 2; do
  for cfg in alexnet:256 resnet50:128 vgg16:64; do
    model=${cfg%%:*} batch=${cfg##*:}
    for tree in before after; do
      bin=$ROOT/build-gpu/bench_train
      [ $tree = before ] && bin=$BEFORE/build/bench_train
      log=$OUT/bench_train.log
      echo "## $tree round $round $model $batch" >> "$log"
      timeout 120 "$bin" --model="$model" --batch_sizes="$batch" --precision=bf16 --warmup=5 \
        --steps=30 --breakdown=false --json="$OUT/one.json" >> "$log" 2>&1
      python3 - "$OUT/one.json" "$tree" "$round" >> "$OUT/bench.jsonl.tmp" <<'PY'
import json, sys
path, tree, rnd = sys.argv[1:]
for l in open(path):
    r = json.loads(l)
    print(json.dumps({"tree": tree, "round": int(rnd), "model": r["model"], "batch": r["batch"],
                      "mode": r["mode"], "img_per_s": round(r["img_per_s"], 1),
                      "ms_per_step_median": r["ms_per_step_median"],
                      "peak_in_use_bytes": r["peak_in_use_bytes"], "device": r.get("device", "")}))
PY
      rm -f "$OUT/one.json"
      say "$tree r$round $model b$batch: $(tail -1 "$OUT/bench.jsonl.tmp" | grep -oE '"img_per_s": [0-9.]+')"
    done
  done
done
say "bench_train in $(( $(date +%s) - t0 )) s"

if [ -z "${SKIP_PEER:-}" ]; then
  t0=$(date +%s)
  timeout 200 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" --batch_sizes=256 \
    --modes=bf16_compile --json="$OUT/peer_alexnet.json" > "$OUT/peer.log" 2>&1
  say "peer alexnet bf16_compile rc=$?"
  timeout 240 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models resnet50 --batch 128 \
    --modes bf16_compile,bf16_cl --json "$OUT/peer_zoo.json" >> "$OUT/peer.log" 2>&1
  say "peer resnet50 rc=$?"
  timeout 120 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models vgg16 --batch 64 \
    --modes bf16_cl --json "$OUT/peer_zoo.json" >> "$OUT/peer.log" 2>&1
  say "peer vgg16 rc=$? (peers in $(( $(date +%s) - t0 )) s)"
fi

python3 - "$OUT" "$COMMIT" "$BEFORE_COMMIT" "$DEV" > "$OUT/results.jsonl" <<'PY'
import json, os, sys
out, commit, before, dev = sys.argv[1:]
def lines(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
for r in lines("bench.jsonl.tmp"):
    r["impl"] = "colonnade"
    r["commit"] = commit if r["tree"] == "after" else before
    r["device"] = dev
    print(json.dumps(r))
for r in lines("peer_alexnet.json"):
    r.update({"impl": "pytorch", "commit": commit, "device": dev})
    print(json.dumps(r))
for r in lines("peer_zoo.json"):
    r.update({"impl": "pytorch", "commit": commit, "device": dev})
    print(json.dumps(r))
PY
rm -f "$OUT/bench.jsonl.tmp" "$OUT/peer_alexnet.json" "$OUT/peer_zoo.json"
say "done: $(wc -l < "$OUT/results.jsonl") records"
