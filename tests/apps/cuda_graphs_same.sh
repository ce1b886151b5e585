#!/usr/bin/env bash
# On a GPU, --cuda_graphs=on trains exactly as off: a run whose learning rate changes every
# step (cosine with warm-up), with dropout (alexnet) or without, and evaluations in the
# middle whose short last batch rebuilds the net (so the step graph is warmed up and
# captured again) gives bitwise the same checkpoint (checkpoint_diff --rtol=0) and the same
# progress lines. The banner says whether graphs are used, --profile_steps shows the graph
# phase. (CPU runs and the refusal of --cuda_graphs=on elsewhere: tests/apps/CMakeLists.txt.)
# Skips (exit 77) on a machine without a GPU, like the GPU GoogleTest suites.
#   cuda_graphs_same.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
"$build/make_shards" --source=synthetic --output="$work/shards" --size=600 --test_size=50 \
  --height=72 --width=72 > "$work/ms.log" 2>&1 || { cat "$work/ms.log"; fail "make_shards"; }
for model in cifar10-18pct alexnet; do
  # cifar10-18pct through the GPU feed (the default), alexnet through the host batch copy.
  size=32; feed=auto; [ "$model" = alexnet ] && size=67 && feed=off
  RUN=(--model=$model --device=cuda --batch_size=33 --steps=8 --seed=5 --crop=$size --mirror
       --lr_schedule=cosine+warmup:0.2 --log_every=1 --eval_every=3 --keep_checkpoints=1
       --resume=none --data="$work/shards/train" --val_data="$work/shards/test"
       --gpu_augment=$feed)
  for mode in on off; do
    "$build/trainer" "${RUN[@]}" --cuda_graphs=$mode --checkpoint_dir="$work/$model-$mode" \
      > "$work/$model-$mode.log" 2>&1 || { cat "$work/$model-$mode.log"; fail "$model --cuda_graphs=$mode"; }
  done
  grep -q "graphs     on" "$work/$model-on.log" || fail "$model: the banner does not show graphs on"
  grep -q "graphs     off (--cuda_graphs=off)" "$work/$model-off.log" ||
    fail "$model: the banner does not show graphs off"
  grep -qi "warning" "$work/$model-on.log" && fail "$model: a warning with graphs on (a failed capture?)"
  # Progress lines up to their timings (loss, errors, lr) and the evaluations.
  lines() { grep -E "^step |^eval " "$1" | sed -E 's/ +[0-9.]+ img\/s.*//'; }
  diff <(lines "$work/$model-on.log") <(lines "$work/$model-off.log") ||
    fail "$model: progress or evaluation lines differ between --cuda_graphs=on and off"
  [ "$(lines "$work/$model-on.log" | grep -c '^eval ')" -ge 2 ] || fail "$model: no evaluations ran"
  "$build/checkpoint_diff" "$work/$model-on/ckpt-000000008.h5" "$work/$model-off/ckpt-000000008.h5" \
    --rtol=0 || fail "$model: --cuda_graphs=on and off trained differently"
done
"$build/trainer" --model=cifar10-80sec --device=cuda --data=synthetic --synthetic_size=512 \
  --batch_size=64 --steps=6 --profile_steps=3 --cuda_graphs=on > "$work/profile.log" 2>&1 ||
  { cat "$work/profile.log"; fail "--profile_steps with graphs"; }
grep -q "graph: whole step" "$work/profile.log" || { cat "$work/profile.log"; fail "no graph phase in the profile"; }
echo "PASS: --cuda_graphs=on equals off bitwise (cifar10-18pct, alexnet with dropout)"
