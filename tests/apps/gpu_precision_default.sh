#!/usr/bin/env bash
# On a GPU, --precision=auto (the trainer's default) trains in bf16 with bf16 activation
# storage and says so in the banner; an explicit --precision=fp32 stays fp32 with FP32
# storage (docs/PRECISION.md, "Default and why"). Skips
# (exit 77) on a machine without a GPU, like the GPU GoogleTest suites.
#   gpu_precision_default.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
RUN=(--model=cifar10-80sec --device=cuda --data=synthetic --synthetic_size=256 --batch_size=32
     --steps=2 --log_every=1 --resume=none)
"$build/trainer" "${RUN[@]}" --checkpoint_dir="$work/auto" > "$work/auto.log" 2>&1 || { cat "$work/auto.log"; fail "default run"; }
grep -qE "device cuda \(bf16, auto, bf16 activations[,)]" "$work/auto.log" ||
  { grep layout "$work/auto.log"; fail "the default on a GPU is not bf16 with bf16 activations"; }
"$build/trainer" "${RUN[@]}" --checkpoint_dir="$work/fp32" --precision=fp32 > "$work/fp32.log" 2>&1 ||
  { cat "$work/fp32.log"; fail "--precision=fp32 run"; }
grep -q "device cuda (fp32)" "$work/fp32.log" || fail "--precision=fp32 did not run in fp32"
echo "PASS: --precision=auto is bf16 (bf16 activations) on the GPU, --precision=fp32 is fp32"
