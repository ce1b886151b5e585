#!/usr/bin/env bash
# One GPU call: the AlexNet training step in each precision, ours (bench_train: the bare
# step; trainer: the whole program on synthetic data) and the PyTorch peer in the same job.
#
#   COMMIT=<full hash> experiments/mixed_precision/run_step.sh OUTDIR [BUILD_DIR]
#
# Writes OUTDIR/step.jsonl (one record per measurement: impl, what, model, mode, batch,
# img_per_s, peak_mem_bytes, commit, device), the logs, and OUTDIR/step.tgz with all of it.
# Knobs: BATCH (256; a comma list for bench_train and the peer, e.g. 128,256), MODES
# (fp32,tf32,bf16; bf16 stores activations in bf16, the default since 2026-12-05; bf16_f32act: bf16 with --nobf16_activations; bf16_act: bf16 with the flag given, docs/PRECISION.md; bf16 runs the convolutions on the sm_90a wgmma kernels where they run, the default since 2026-12-05; bf16_wgmma: bf16 with --conv_config=wgmma (an error without them); bf16_mma: bf16 on mma.sync, bench_train --conv_config=mma, COLONNADE_CONV_CONFIG=mma for the trainer), PEER_MODES (fp32,tf32,bf16_cl; add bf16_compile, about a minute per
# batch, for the batches in COMPILE_BATCHES: 256), TRAINER_MODES (MODES), TRAINER_BATCH
# (the last of BATCH), TRAINER_STEPS (60), SKIP_PEER=1, SKIP_BUILD=1 (run the bench_train and
# trainer already in BUILD_DIR, e.g. built on another machine).
set -uo pipefail
OUT=${1:?usage: run_step.sh OUTDIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$ROOT/build-gpu}
BATCH=${BATCH:-256}
MODES=${MODES:-fp32,tf32,bf16}
PEER_MODES=${PEER_MODES:-fp32,tf32,bf16_cl}
TRAINER_STEPS=${TRAINER_STEPS:-60}
TRAINER_MODES=${TRAINER_MODES-$MODES}  # empty: no trainer runs
TRAINER_BATCH=${TRAINER_BATCH:-${BATCH##*,}}
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PREFIX=()
if [ -d /opt/absl/usr ]; then
  PREFIX=(-DCMAKE_PREFIX_PATH=/opt/absl/usr)
  export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/summary.txt" >&2; }
trap 'python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT/summary.txt" > /dev/null 2>&1; tar czf "$OUT/step.tgz" -C "$OUT" --exclude=step.tgz . 2>/dev/null' EXIT
J=$OUT/step.jsonl
: > "$J"

t0=$(date +%s)
if [ -n "${SKIP_BUILD:-}" ]; then
  say "build skipped: the binaries in $BUILD"
else
  { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCOLONNADE_CUDA=ON -DCOLONNADE_CUDA_EMULATION=OFF "${PREFIX[@]}" &&
    cmake --build "$BUILD" -j"$(nproc)" --target trainer bench_train; } > "$OUT/build.log" 2>&1 ||
    { say "build FAILED"; tail -20 "$OUT/build.log"; exit 1; }
  say "build ok in $(( $(date +%s) - t0 )) s"
fi
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

# A mode's flags: bf16_act gives --bf16_activations (the default of bf16 since 2026-12-05),
# bf16_f32act keeps the activations FP32.
mode_flags() {
  case $1 in
  bf16_act) echo "--precision=bf16 --bf16_activations" ;;
  bf16_f32act) echo "--precision=bf16 --nobf16_activations" ;;
  bf16_wgmma) echo "--precision=bf16 --conv_config=wgmma" ;;
  bf16_mma) echo "--precision=bf16 --conv_config=mma" ;;
  *) echo "--precision=$1" ;;
  esac
}

for m in ${MODES//,/ }; do
  # shellcheck disable=SC2046
  "$BUILD/bench_train" --model=alexnet --batch_sizes="$BATCH" $(mode_flags "$m") \
    --warmup=5 --steps=30 --breakdown=false --json="$OUT/bench_train_$m.json" \
    > "$OUT/bench_train_$m.log" 2>&1
  say "bench_train $m: $(grep -E 'img/s' "$OUT/bench_train_$m.log" | head -1)"
  python3 - "$OUT/bench_train_$m.json" "$COMMIT" "$m" >> "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({"impl": "colonnade", "what": "bench_train", "model": r["model"],
                      "mode": sys.argv[3], "batch": r["batch"], "img_per_s": round(r["img_per_s"], 1),
                      "peak_mem_bytes": r["peak_in_use_bytes"], "loss_first": r["loss_first"],
                      "loss_last": r["loss_last"], "device": r["device"], "commit": sys.argv[2]}))
PY
done

TRAINER=$BUILD/trainer
for m in ${TRAINER_MODES//,/ }; do
  # The trainer takes the choice of convolution instructions from the environment
  # (COLONNADE_CONV_CONFIG, bench_train's --conv_config; unset: wgmma where it runs).
  cc= tflags=$(mode_flags "$m")
  [ "$m" = bf16_wgmma ] && cc=wgmma tflags=--precision=bf16
  [ "$m" = bf16_mma ] && cc=mma tflags=--precision=bf16
  # shellcheck disable=SC2086
  env ${cc:+COLONNADE_CONV_CONFIG=$cc} timeout 120 "$TRAINER" --model=alexnet --device=cuda --data=synthetic \
    --batch_size="$TRAINER_BATCH" --steps="$TRAINER_STEPS" --log_every=20 \
    --data_threads="$(nproc)" $tflags \
    --metrics_file="$OUT/trainer_$m.metrics.jsonl" > "$OUT/trainer_$m.log" 2>&1
  say "trainer $m rc=$?: $(grep -E 'step +'"$TRAINER_STEPS"' ' "$OUT/trainer_$m.log" | tail -1)"
  python3 - "$OUT/trainer_$m.metrics.jsonl" "$COMMIT" "$m" "$TRAINER_BATCH" "$DEV" >> "$J" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tr = [r for r in recs if r.get("kind") == "train"]
if tr:
    last = tr[-1]
    print(json.dumps({"impl": "colonnade", "what": "trainer", "model": "alexnet",
                      "mode": sys.argv[3], "batch": int(sys.argv[4]),
                      "img_per_s": last.get("images_per_sec"),
                      "data_wait_sec_last_interval": last.get("data_wait_sec"),
                      "loss_last": last.get("loss"), "device": sys.argv[5],
                      "commit": sys.argv[2]}))
PY
done

if [ -z "${SKIP_PEER:-}" ]; then
  timeout 360 python3 "$ROOT/experiments/peer_pytorch/alexnet_step.py" --batch_sizes "$BATCH" \
    --compile_batches "${COMPILE_BATCHES:-256}" \
    --modes "$PEER_MODES" --json "$OUT/pytorch.json" > "$OUT/pytorch.log" 2>&1
  say "pytorch rc=$?: $(grep -E 'img/s' "$OUT/pytorch.log" | tr '\n' ' ')"
  python3 - "$OUT/pytorch.json" "$COMMIT" "$DEV" >> "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(json.dumps({"impl": "pytorch", "what": "bench_train", "model": "alexnet",
                          "mode": r["mode"], "batch": r["batch"], "error": r["error"],
                          "device": sys.argv[3], "commit": sys.argv[2]}))
        continue
    print(json.dumps({"impl": "pytorch", "what": "bench_train", "model": "alexnet",
                      "mode": r["mode"], "batch": r["batch"], "img_per_s": round(r["img_per_s"], 1),
                      "peak_mem_bytes": r["max_memory_allocated"], "loss_first": r["loss_first"],
                      "loss_last": r["loss_last"], "torch": r["torch"], "device": sys.argv[3],
                      "commit": sys.argv[2]}))
PY
fi
say "done; $(wc -l < "$J") records in step.jsonl"
