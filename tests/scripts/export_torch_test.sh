#!/usr/bin/env bash
# scripts/export_torch.py against the trainer: for every exportable model, train a small
# checkpoint for two CPU steps, predict a few images with `trainer --mode=predict`, export
# the checkpoint and compare the exported model's logits with the trainer's (max relative
# difference <= 1e-4, tests/scripts/export_compare.py). Semantics are perturbed on purpose
# for alexnet, cifar10-18pct, resnet18, resnet9 and ResNet-D (LRN k, LRN columns, rnorm alpha,
# the average pooling divisor, the stem pool's rounding, ResNet-9's output scale, ResNet-D's
# averaging shortcut): each must be detected as a drift. resnet9-rrc is resnet9 trained with
# --random_resized_crop: its evaluation (and the export) resizes the centre square.
#   export_torch_test.sh TRAINER MAKE_SHARDS [PYTHON] [MODEL...]
# PYTHON defaults to /usr/bin/python3 (Debian's python3-torch); MODELs default to all.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TRAINER=${1:?usage: export_torch_test.sh TRAINER MAKE_SHARDS [PYTHON] [MODEL...]}
MAKE_SHARDS=${2:?usage: export_torch_test.sh TRAINER MAKE_SHARDS [PYTHON] [MODEL...]}
PY=${3:-/usr/bin/python3}
shift $(( $# >= 3 ? 3 : $# ))
# shellcheck disable=SC1091  # tests/skip_policy.sh: skip_or_fail
. "$HERE/../skip_policy.sh"
"$PY" -c 'import torch, h5py' 2>/dev/null || skip_or_fail "no torch/h5py for $PY (python3-torch python3-h5py)"
"$PY" -c 'import onnx' 2>/dev/null || skip_or_fail "no onnx for $PY (python3-onnx)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export COLONNADE_CPU_THREADS=${COLONNADE_CPU_THREADS:-2} PYTHONWARNINGS=ignore
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Synthetic raw shards, 10 classes: at the input size (32) and larger (36, 71) so that the
# centre crop is exercised, with the mean image subtracted at the source pixel.
shards() {  # SIDE
  [ -d "$work/syn$1" ] && return
  "$MAKE_SHARDS" --source=synthetic --output="$work/syn$1" --height="$1" --width="$1" \
    --size=24 --test_size=6 --classes=10 --progress=false >/dev/null 2>&1 ||
    fail "make_shards --source=synthetic at $1 px"
}

# check MODEL INPUT DATA_SIDE "TRAIN FLAGS" "COMPARE FLAGS"
check() {
  local model=$1 input=$2 side=$3 flags=$4 cmp=$5 t0=$SECONDS
  shards "$side"
  local ck=$work/$model.$side
  # shellcheck disable=SC2086
  "$TRAINER" --model="$model" --device=cpu --data="$work/syn$side/train" --input_size="$input" \
    --steps=2 --batch_size=4 --checkpoint_dir="$ck" --log_every=1 $flags >"$work/$model.train.log" 2>&1 ||
    { cat "$work/$model.train.log"; fail "$model: training"; }
  local ckpt; ckpt=$(ls "$ck"/ckpt-*.h5)
  # Scaled-up first-layer weights put the normalisations in their non-linear range, so that
  # a wrong LRN / rnorm constant changes the logits measurably (trained 2 steps from a
  # small init, they are nearly linear).
  case $model in
    alexnet) "$PY" "$HERE/scale_param.py" "$ckpt" conv1/weight 10 ;;
    cifar10-18pct) "$PY" "$HERE/scale_param.py" "$ckpt" conv1/weight 1000 ;;
  esac
  # shellcheck disable=SC2086
  "$TRAINER" --mode=predict --model="$model" --device=cpu --val_data="$work/syn$side/test" \
    --input_size="$input" --resume="$ckpt" --predictions="$work/$model.pred.h5" --batch_size=4 \
    $flags >"$work/$model.pred.log" 2>&1 || { cat "$work/$model.pred.log"; fail "$model: predict"; }
  # shellcheck disable=SC2086
  "$PY" "$HERE/export_compare.py" "$ckpt" "$work/syn$side/test" "$work/$model.pred.h5" "$work" $cmp ||
    fail "$model: exported logits differ from trainer --mode=predict"
  rm -rf "$ck"
  echo "  ($model: $((SECONDS - t0)) s)"
}

models=("$@")
[ ${#models[@]} -gt 0 ] || models=(alexnet cifar10-18pct cifar10-80sec resnet18-cifar resnet18
                                   resnet34 resnet50 resnet152 resnet18d resnet50d resnet9
                                   resnet9-rrc)
for m in "${models[@]}"; do
  case $m in
    alexnet) check alexnet 67 71 "--columns=2" "--onnx --perturb lrn_k --perturb lrn_columns" ;;
    alexnet-plain) check alexnet 67 67 "--columns=2" "--plain" ;;
    cifar10-18pct) check cifar10-18pct 32 36 "" "--onnx --perturb rnorm_alpha --perturb avg_divisor" ;;
    cifar10-80sec) check cifar10-80sec 32 32 "--mean=channel" "" ;;
    # The ResNets at lr 1e-4 (their running statistics still move at momentum 0.1): with
    # batch 4 at 32x32 (batch norm over 4 values at 1x1 in the last stage) the first step's
    # gradients are huge; at lr 0.1 ResNet-50's second loss was 102 and its predicted
    # logits NaN, at 1e-3 ResNet-152's batch-norm gammas reached 48 and its activations at
    # inference overflow float32 (1e41 in double), which the trainer's ReLU turns into
    # finite numbers (it maps NaN to 0) and PyTorch's into NaN.
    resnet18-cifar) check resnet18-cifar 32 32 "--lr=1e-4" "--plain" ;;
    resnet18) check resnet18 32 36 "--lr=1e-4" "--perturb stem_pool_ceil" ;;
    resnet34|resnet50|resnet152) check "$m" 32 32 "--lr=1e-4" "" ;;
    resnet18d) check resnet18d 32 36 "--lr=1e-4" "--perturb d_shortcut_stride" ;;
    resnet50d) check resnet50d 32 32 "--lr=1e-4" "--onnx --perturb d_shortcut_stride" ;;
    resnet9) check resnet9 32 32 "--lr=1e-4 --mean=channel" "--plain --perturb resnet9_out_scale" ;;
    # Trained with the random-resized crop: evaluation and the export resize the centre 35x35
    # of the 40x40 images (fraction 0.875) to 32x32 with the same fixed-point bilinear.
    resnet9-rrc) check resnet9 32 40 "--lr=1e-4 --random_resized_crop --cutout=8" "" ;;
    *) fail "unknown model $m" ;;
  esac
done
echo "ok: export_torch.py matches trainer --mode=predict for ${models[*]}"
