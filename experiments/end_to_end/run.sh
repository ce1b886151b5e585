#!/usr/bin/env bash
# One GPU call: the whole trainer against its bare step (bench_train) and against the
# PyTorch peer's memory, on the configurations of the end-to-end issue. Every record is one
# JSON line in OUTDIR/e2e.jsonl with: what (trainer | bench_train | pipeline), impl
# (colonnade | pytorch), model, batch, precision, img_per_s, data_wait_frac, peak_mem_bytes,
# commit, device (and extras). Timelines (--profile_steps) and logs go beside it, and
# OUTDIR/e2e.tgz holds everything.
#
#   COMMIT=<full hash> experiments/end_to_end/run.sh OUTDIR DATA_DIR [BUILD_DIR]
#
# DATA_DIR holds shard directories made by make_shards: cifar10_train (CIFAR-10, JPEG) and
# imagenette_train (Imagenette 224, JPEG); a missing one skips its rows. cifar10_train_raw
# (the same images as raw shards) is made from cifar10_train here (make_shards
# --source=shards) when missing. Knobs: PARTS
# (comma list of synthetic,imagenette,cifar,resnet,decoders,cifar_threads,memory,maxbatch,
# pipeline; default all),
# PRECISIONS (fp32,bf16), SKIP_PEER=1, LADDER and PEER_LADDER (the maxbatch part's batches,
# ours and PyTorch's; default 256 512 768 1024 1536 2048).
set -uo pipefail
OUT=${1:?usage: run.sh OUTDIR DATA_DIR [BUILD_DIR]}
DATA=${2:?usage: run.sh OUTDIR DATA_DIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${3:-$ROOT/build-gpu}
PARTS=${PARTS:-synthetic,imagenette,cifar,resnet,decoders,cifar_threads,memory,maxbatch,pipeline}
PRECISIONS=${PRECISIONS:-fp32,bf16}
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=$(cd "$DATA" && pwd)
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
part() { [[ ",$PARTS," == *",$1,"* ]]; }
trap 'python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT/summary.txt" > /dev/null 2>&1; tar czf "$OUT/e2e.tgz" -C "$OUT" --exclude=e2e.tgz . 2>/dev/null' EXIT
J=$OUT/e2e.jsonl
touch "$J"

t0=$(date +%s)
{ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF "${PREFIX[@]}" &&
  cmake --build "$BUILD" -j"$(nproc)" --target trainer bench_train bench_data make_shards; } \
  >> "$OUT/build.log" 2>&1 || { say "build FAILED"; tail -20 "$OUT/build.log"; exit 1; }
say "build ok in $(( $(date +%s) - t0 )) s"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
NVJPEG=$(grep "^NVJPEG_LIBRARY:FILEPATH=" "$BUILD/CMakeCache.txt" | cut -d= -f2)
case "$NVJPEG" in ""|*NOTFOUND) NVJPEG= ;; esac
say "nvJPEG: ${NVJPEG:-not in this build}"
if [ -d "$DATA/cifar10_train" ] && [ ! -d "$DATA/cifar10_train_raw" ]; then
  RAWDATA=$(mktemp -d)
  "$BUILD/make_shards" --source=shards --input="$DATA/cifar10_train" \
    --output="$RAWDATA/cifar10_train_raw" --encoding=raw --threads="$(nproc)" >> "$OUT/build.log" 2>&1 &&
    say "made raw CIFAR-10 shards from the JPEG ones"
else
  RAWDATA=$DATA
fi
export E2E_COMMIT=$COMMIT E2E_DEVICE=$DEV

# trainer NAME MODEL BATCH PRECISION STEPS LOG_EVERY ARGS...: the whole program with
# default flags (plus ARGS); img/s and data-wait of its last progress interval, the
# measured peak device memory, the --profile_steps timeline in NAME.log.
trainer() {
  local name=$1 model=$2 batch=$3 prec=$4 steps=$5 every=$6; shift 6
  timeout 300 "$BUILD/trainer" --model="$model" --device=cuda --batch_size="$batch" \
    --precision="$prec" --steps="$steps" --log_every="$every" --profile_steps=10 \
    --metrics_file="$OUT/$name.metrics.jsonl" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  say "trainer $name rc=$rc: $(grep -E '^step' "$OUT/$name.log" | tail -1 | cut -c1-160)"
  /usr/bin/env python3 - "$OUT/$name.metrics.jsonl" "$OUT/$name.log" "$name" "$model" "$batch" \
    "$prec" "$every" "$*" >> "$J" <<'PY'
import json, os, re, sys
path, log, name, model, batch, prec, every, args = sys.argv[1:]
recs = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
tr = [r for r in recs if r.get("kind") == "train"]
text = open(log).read()
peak = re.findall(r"measured peak ([0-9.]+) GiB", text)
rec = {"what": "trainer", "impl": "colonnade", "name": name, "model": model,
       "batch": int(batch), "precision": prec, "args": args,
       "commit": os.environ["E2E_COMMIT"], "device": os.environ["E2E_DEVICE"]}
if tr:
    last = tr[-1]
    ips = last["images_per_sec"]
    interval_s = int(every) * int(batch) / ips
    rec.update(img_per_s=ips, data_wait_frac=round(last["data_wait_sec"] / interval_s, 4))
else:
    rec["error"] = (text.strip().splitlines() or ["no output"])[-1][:200]
if peak:
    rec["peak_mem_bytes"] = int(float(peak[-1]) * 2**30)
print(json.dumps(rec))
PY
}

# bench NAME MODEL BATCHES PRECISION ARGS...: the bare step, one record per batch.
bench() {
  local name=$1 model=$2 batches=$3 prec=$4; shift 4
  timeout 300 "$BUILD/bench_train" --model="$model" --batch_sizes="$batches" --precision="$prec" \
    --warmup=5 --steps=20 --breakdown=false --json="$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  say "bench_train $name rc=$?: $(grep -E 'img/s' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-200)"
  [ -f "$OUT/$name.json" ] || { echo "{\"what\": \"bench_train\", \"impl\": \"colonnade\", \"name\": \"$name\", \"model\": \"$model\", \"batch\": \"$batches\", \"precision\": \"$prec\", \"error\": \"no result (out of memory?)\", \"commit\": \"$COMMIT\"}" >> "$J"; return; }
  /usr/bin/env python3 - "$OUT/$name.json" "$name" "$*" >> "$J" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({"what": "bench_train", "impl": "colonnade", "name": sys.argv[2],
                      "model": r["model"], "batch": r["batch"], "precision": r["mode"],
                      "args": sys.argv[3], "img_per_s": round(r["img_per_s"], 1),
                      "data_wait_frac": 0.0, "peak_mem_bytes": r["peak_in_use_bytes"],
                      "commit": os.environ["E2E_COMMIT"], "device": os.environ["E2E_DEVICE"]}))
PY
}

# peer MODEL BATCH MODE: the PyTorch step's img/s and peak memory (torchvision models, or the
# paper's AlexNet from experiments/peer_pytorch).
peer() {
  local model=$1 batch=$2 mode=$3
  [ -n "${SKIP_PEER:-}" ] && return
  if [ "$model" = alexnet ]; then
    timeout 240 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" --batch_sizes "$batch" \
      --modes "$mode" --compile_batches 0 --json "$OUT/peer_$model.$batch.$mode.json" \
      >> "$OUT/pytorch.log" 2>&1
  else
    timeout 240 python3 "$ROOT/experiments/zoo/torchvision_step.py" --models "$model" \
      --batch "$batch" --modes "$mode" --steps 10 --repeats 2 \
      --json "$OUT/peer_$model.$batch.$mode.json" >> "$OUT/pytorch.log" 2>&1
  fi
  say "pytorch $model $batch $mode rc=$?"
  /usr/bin/env python3 - "$OUT/peer_$model.$batch.$mode.json" "$model" "$batch" "$mode" >> "$J" <<'PY'
import json, os, sys
path, model, batch, mode = sys.argv[1:]
if not os.path.exists(path):
    print(json.dumps({"what": "bench_train", "impl": "pytorch", "model": model, "batch": int(batch),
                      "precision": mode, "error": "no result (out of memory?)",
                      "commit": os.environ["E2E_COMMIT"], "device": os.environ["E2E_DEVICE"]}))
    sys.exit(0)
for line in open(path):
    r = json.loads(line)
    if "error" in r:
        continue
    ips = r.get("img_per_s", r.get("images_per_sec"))
    mem = r.get("max_memory_allocated", r.get("peak_mem_mib", 0) * 2**20)
    print(json.dumps({"what": "bench_train", "impl": "pytorch", "model": model,
                      "batch": int(batch), "precision": mode, "img_per_s": round(ips, 1),
                      "data_wait_frac": 0.0, "peak_mem_bytes": int(mem),
                      "commit": os.environ["E2E_COMMIT"], "device": os.environ["E2E_DEVICE"]}))
PY
}

for p in ${PRECISIONS//,/ }; do
  if part synthetic; then
    bench "alexnet_b256_$p" alexnet 256 "$p"
    trainer "alexnet_b256_synthetic_$p" alexnet 256 "$p" 100 20 --data=synthetic
    trainer "alexnet_b256_synthetic_hostfeed_$p" alexnet 256 "$p" 100 20 --data=synthetic \
      --gpu_augment=off
  fi
  if part imagenette && [ -d "$DATA/imagenette_train" ]; then
    trainer "alexnet_b256_imagenette_$p" alexnet 256 "$p" 100 20 --data="$DATA/imagenette_train" \
      --mirror
    [ -n "$NVJPEG" ] && trainer "alexnet_b256_imagenette_nvjpeg_$p" alexnet 256 "$p" 100 20 \
      --data="$DATA/imagenette_train" --mirror --jpeg_decoder=nvjpeg
  fi
  if part cifar && [ -d "$DATA/cifar10_train" ]; then
    bench "cifar18_b128_$p" cifar10-18pct 128 "$p"
    # 3,000 steps, the last 1,000 measured: 0.5 s at 250k img/s (600 steps measured 50 ms).
    trainer "cifar18_b128_cifar_$p" cifar10-18pct 128 "$p" 3000 1000 --data="$DATA/cifar10_train"
    [ -d "$RAWDATA/cifar10_train_raw" ] && trainer "cifar18_b128_cifarraw_$p" cifar10-18pct 128 \
      "$p" 3000 1000 --data="$RAWDATA/cifar10_train_raw"
  fi
  if part resnet; then
    bench "resnet50_b128_$p" resnet50 128 "$p"
    trainer "resnet50_b128_synthetic_$p" resnet50 128 "$p" 60 20 --data=synthetic
  fi
done

if part decoders && [ -n "$NVJPEG" ] && [ -d "$DATA/imagenette_train" ]; then
  # Host (libjpeg) against nvJPEG decoding with fewer host threads than the 16 of the rows
  # above: where nvJPEG's decoding off the host pays.
  for th in 4 8; do
    for dec in host nvjpeg; do
      trainer "alexnet_b256_imagenette_${dec}_t${th}_bf16" alexnet 256 bf16 100 20 \
        --data="$DATA/imagenette_train" --mirror --jpeg_decoder=$dec --data_threads=$th
    done
  done
fi

if part cifar_threads && [ -d "$DATA/cifar10_train" ]; then
  # cifar10-18pct bf16 with fewer data threads than cores (the main thread then never
  # shares a core with a reader), JPEG and raw shards.
  for th in 4 8; do
    trainer "cifar18_b128_cifar_t${th}_bf16" cifar10-18pct 128 bf16 3000 1000 \
      --data="$DATA/cifar10_train" --data_threads=$th
    [ -d "$RAWDATA/cifar10_train_raw" ] && trainer "cifar18_b128_cifarraw_t${th}_bf16" \
      cifar10-18pct 128 bf16 3000 1000 --data="$RAWDATA/cifar10_train_raw" --data_threads=$th
  done
fi

if part memory; then
  # Peak device memory, ours (with and without the memory plan) and PyTorch's, FP32.
  for mb in "resnet50 64" "alexnet 256" "vgg16 64"; do
    set -- $mb
    bench "mem_$1_b$2_plan" "$1" "$2" fp32 --memory_plan=on
    bench "mem_$1_b$2_noplan" "$1" "$2" fp32 --memory_plan=off
    peer "$1" "$2" fp32
  done
fi

if part maxbatch; then
  # The largest ResNet-50 batch (FP32) that trains, ours and PyTorch's, among a ladder.
  for b in ${LADDER:-256 512 768 1024 1536 2048}; do
    bench "maxbatch_resnet50_b$b" resnet50 "$b" fp32 --warmup=1 --steps=2 || true
    grep -q '"batch": '"$b" "$OUT/maxbatch_resnet50_b$b.json" 2>/dev/null || break
  done
  for b in ${PEER_LADDER:-256 512 768 1024 1536 2048}; do
    peer resnet50 "$b" fp32
    grep -qE '"(img_per_s|images_per_sec)"' "$OUT/peer_resnet50.$b.fp32.json" 2>/dev/null || break
  done
fi

if part pipeline; then
  # The feed alone, without a network: the host pipeline (uint8 output), and the whole GPU
  # feed (uint8 copied and augmented on the device; JPEG decoded by nvJPEG), on the real
  # shards, 16 threads (8 too for Imagenette).
  GPU_OUTS=uint8,gpu_uint8
  [ -n "$NVJPEG" ] && GPU_OUTS=$GPU_OUTS,gpu_nvjpeg
  pipe() {  # NAME DATASET BATCH CROP THREADS [ENV...]
    local name=$1 ds=$2 b=$3 crop=$4 th=$5; shift 5
    [ -d "$ds" ] || return
    env "$@" timeout 120 "$BUILD/bench_data" --dataset="$ds" --outputs="$GPU_OUTS" \
      --threads_list="$th" --batch="$b" --crop="$crop" --batches=30 \
      --csv="$OUT/pipeline_$name.csv" > "$OUT/pipeline_$name.log" 2>&1
    say "bench_data $name rc=$?: $(grep -E '^(jpeg|raw) ' "$OUT/pipeline_$name.log" | tr -s ' ' | tr '\n' ';')"
  }
  pipe imagenette "$DATA/imagenette_train" 256 224 8,16
  [ -n "$NVJPEG" ] && pipe imagenette_gpuhybrid "$DATA/imagenette_train" 256 224 16 \
    COLONNADE_NVJPEG_BACKEND=gpu_hybrid
  pipe cifar "$DATA/cifar10_train" 128 32 16
  pipe cifar_raw "$RAWDATA/cifar10_train_raw" 128 32 16
fi
say "done; $(wc -l < "$J") records in e2e.jsonl"
