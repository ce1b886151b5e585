#!/usr/bin/env bash
# Every command of README.md, run as a new user runs it (issue 31: "every README command
# runs as written on a fresh machine").
#
#   readme_commands_test.sh TRAINER MAKE_SHARDS [PYTHON]   (PYTHON: default /usr/bin/python3)
#
# The commands are taken from README.md itself: every line of its ```sh blocks (a trailing
# backslash joins the next line; comments and blank lines are dropped) and every inline
# `scripts/NAME ARGS` span. Each must be listed in COMMANDS below with how this test runs
# it, and each listed command must still be in README.md: a changed or added README command
# fails the test until the table says how to run it, so nothing is silently left out.
#
# How a command is run (the first word of its entry):
#   run        as written
#   run+ARGS   as written with ARGS appended (said on the output line, with the reason)
#   check+ARGS only the flags, paths and model are checked (--print_memory_plan: the
#              trainer builds everything and exits 0 without training)
#   demo       `scripts/setup.sh && scripts/demo.sh`: demo.sh as written; setup.sh is not
#              run again inside ctest (it would reconfigure and rebuild the build under
#              test); CI runs it first: .ci/run -> scripts/test.sh -> scripts/setup.sh
#   suite      `scripts/test.sh` is the whole suite this test is part of (CI's entry point)
#   export     scripts/export_torch.py on a checkpoint and dataset this test made (the
#              README's are ImageNet paths), with a python3 first on PATH that has none of
#              the packages (it must re-run itself under /usr/bin/python3), then the
#              README's ```python block on the exported model
#   filters    scripts/show_filters.py on that checkpoint
#   skip:gpu      needs a GPU (the command says --device=cuda)
#   skip:imagenet needs the ImageNet shards (the command names /scratch/)
#   skip:mpirun8  needs 8 ranks (mpirun -np 8) and the ImageNet shards
# A skip prints its reason; the skip reasons are checked against the command.
#
# Substitutions, for every command: `build/` is the build directory under test (TRAINER's),
# /tmp/cifar10 a fresh temporary directory, and commands run from the repository root.
# Needs ../shared/data/cifar10-jpeg.tar.gz (or $COLONNADE_SHARED_DATA) and Debian's python3
# packages (h5py, numpy, matplotlib, torch): without them the test skips (77), and fails
# under COLONNADE_NO_SKIP=1 (CI). About 3 minutes on 2 cores.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRAINER=${1:?usage: readme_commands_test.sh TRAINER MAKE_SHARDS [PYTHON]}
MAKE_SHARDS=${2:?usage: readme_commands_test.sh TRAINER MAKE_SHARDS [PYTHON]}
PY=${3:-/usr/bin/python3}
README=${README:-$ROOT/README.md}  # another file only to show that the test catches drift
BUILD=$(cd "$(dirname "$TRAINER")" && pwd)
# shellcheck disable=SC1091  # tests/skip_policy.sh: skip_or_fail
. "$HERE/../skip_policy.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- the table: how each README command is run -------------------------------------------
ACTIONS=() COMMANDS=()
cmd() { ACTIONS+=("$1"); COMMANDS+=("$2"); }
cmd demo 'scripts/setup.sh && scripts/demo.sh'
cmd suite 'scripts/test.sh'
cmd run 'build/trainer --model=cifar10-80sec --data=synthetic --device=cpu --steps=200 --batch_size=64'
cmd run 'scripts/prepare_cifar10.sh /tmp/cifar10'
# One epoch is about 6 minutes on 2 cores: 20 steps and the whole evaluation here (the
# full epoch runs in trainer.cifar10_80sec_one_epoch); the checkpoint is the export's.
cmd "run+--steps=20 --checkpoint_dir=/tmp/cifar10/ckpt" 'build/trainer --model=cifar10-80sec --data=/tmp/cifar10/train --val_data=/tmp/cifar10/test --epochs=1'
# A GPU run of 55 epochs; on 2 CPU cores even its final evaluation takes 5 minutes.
cmd "check+--print_memory_plan" 'build/trainer --model=resnet18-cifar --data=/tmp/cifar10/train --val_data=/tmp/cifar10/test --epochs=55 --pad=4 --mirror --eval_every=390'
cmd skip:imagenet 'build/trainer --model=alexnet --mode=eval --val_data=/scratch/imagenet-shards/val --crop=224 --resume=ckpt/ckpt-000450000.h5 --eval_views=10'
cmd skip:gpu 'build/trainer --model=alexnet --device=cuda --data=synthetic --steps=40 --profile_steps=10'
cmd skip:mpirun8 'mpirun -np 8 build/trainer --model=alexnet --mp=2 --data=/scratch/imagenet-shards --crop=224 --mirror'
cmd export 'scripts/export_torch.py ckpt/ckpt-000450000.h5 alexnet.pt --dataset=/scratch/imagenet-shards/train --onnx'
cmd filters 'scripts/show_filters.py CHECKPOINT conv1.png --csv conv1.csv'

# ---- the README's commands ---------------------------------------------------------------
[ -f "$README" ] || fail "$README not found"
mapfile -t readme_cmds < <(awk '
  /^```sh[[:space:]]*$/ { inblock = 1; line = ""; next }
  inblock && /^```/ { inblock = 0; next }
  inblock {
    s = $0
    if (line == "" && (s ~ /^[[:space:]]*#/ || s ~ /^[[:space:]]*$/)) next
    cont = sub(/[[:space:]]*\\$/, "", s)
    if (line != "") sub(/^[[:space:]]+/, "", s)
    line = (line == "" ? s : line " " s)
    if (!cont) { print line; line = "" }
    next
  }
  {  # inline spans of a scripts/ command with arguments: `scripts/NAME ARG...`
    s = $0
    while (match(s, /`scripts\/[^` ]+ [^`]+`/)) {
      print substr(s, RSTART + 1, RLENGTH - 2)
      s = substr(s, RSTART + RLENGTH)
    }
  }' "$README")
[ ${#readme_cmds[@]} -gt 0 ] || fail "no commands found in $README"

errors=0
for c in "${readme_cmds[@]}"; do
  found=0
  for k in "${!COMMANDS[@]}"; do [ "${COMMANDS[$k]}" = "$c" ] && found=1; done
  [ $found = 1 ] || { echo "FAIL: README command not in this test's table (say how to run it in $0): $c" >&2; errors=$((errors + 1)); }
done
for k in "${!COMMANDS[@]}"; do
  found=0
  for c in "${readme_cmds[@]}"; do [ "${COMMANDS[$k]}" = "$c" ] && found=1; done
  [ $found = 1 ] || { echo "FAIL: no longer in README.md (update this test's table): ${COMMANDS[$k]}" >&2; errors=$((errors + 1)); }
done
[ $errors = 0 ] || exit 1
echo "README.md: ${#readme_cmds[@]} commands, each in the table"

# ---- what the runs need ------------------------------------------------------------------
shared=${COLONNADE_SHARED_DATA:-$ROOT/../shared/data}
[ -f "$shared/cifar10-jpeg.tar.gz" ] || skip_or_fail "$shared/cifar10-jpeg.tar.gz not found"
"$PY" -c 'import h5py, numpy, matplotlib, torch' 2>/dev/null ||
  skip_or_fail "no h5py/numpy/matplotlib/torch for $PY (python3-h5py python3-matplotlib python3-torch)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONWARNINGS=ignore
export MAKE_SHARDS  # prepare_cifar10.sh's binary: the build under test
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# A python3 without any of the packages, first on PATH for the export (a venv: a link to
# Debian's interpreter that does not see its dist-packages).
mkdir -p "$work/bare/bin"
ln -s "$(readlink -f "$PY")" "$work/bare/bin/python3"
printf 'home = %s\ninclude-system-site-packages = false\n' "$(dirname "$(readlink -f "$PY")")" \
  >"$work/bare/pyvenv.cfg"
if "$work/bare/bin/python3" -c 'import h5py' 2>/dev/null; then
  fail "the bare python3 ($work/bare/bin/python3) sees h5py; cannot test the re-run"
fi

subst() {  # COMMAND -> the command with this machine's paths
  local s=$1
  s=${s//\/tmp\/cifar10/$work/cifar10}
  # build/ at the start of a word: the build directory under test
  sed -E "s#(^|[ =])build/#\\1$BUILD/#g" <<<"$s"
}
run_logged() {  # LABEL COMMAND: runs it with bash from the root, prints the tail on failure
  local label=$1 c=$2 t0=$SECONDS rc
  echo "RUN: $c"
  (cd "$ROOT" && bash -c "$c") >"$work/log" 2>&1; rc=$?
  if [ $rc != 0 ]; then
    tail -n 30 "$work/log" >&2
    fail "$label exited $rc: $c"
  fi
  echo "  ok ($((SECONDS - t0)) s): $(grep -E '^done:|converted in|wrote|predicted peak' "$work/log" | tail -n 1)"
}

newest_checkpoint() {  # of the CIFAR-10 run (its --checkpoint_dir above)
  local f newest=""
  for f in "$work"/cifar10/ckpt/ckpt-*.h5; do [ -e "$f" ] && newest=$f; done
  [ -n "$newest" ] || fail "no checkpoint from the CIFAR-10 run (the export's and show_filters' input)"
  echo "$newest"
}

ran=0 checked=0 skipped=0
for k in "${!COMMANDS[@]}"; do
  action=${ACTIONS[$k]} c=${COMMANDS[$k]}
  case $action in
  run) run_logged "README command" "$(subst "$c")"; ran=$((ran + 1)) ;;
  run+*)
    extra=$(subst "${action#run+}")
    echo "(with $extra appended: see the table's comment)"
    run_logged "README command" "$(subst "$c") $extra"; ran=$((ran + 1)) ;;
  check+*)
    extra=${action#check+}
    echo "(flags checked with $extra, not trained: see the table's comment)"
    run_logged "README command" "$(subst "$c") $extra"; checked=$((checked + 1)) ;;
  demo)
    { grep -q 'scripts/setup.sh' "$ROOT/scripts/test.sh" && grep -q 'scripts/test.sh' "$ROOT/.ci/run"; } ||
      fail "the table says CI runs scripts/setup.sh (.ci/run -> scripts/test.sh -> setup.sh); it does not"
    echo "SKIP (CI runs it first: .ci/run -> scripts/test.sh -> scripts/setup.sh): scripts/setup.sh"
    run_logged "scripts/demo.sh" "BUILD_DIR=$BUILD scripts/demo.sh"; ran=$((ran + 1)) ;;
  suite)
    grep -q 'scripts/test.sh' "$ROOT/.ci/run" || fail ".ci/run does not run scripts/test.sh"
    echo "SKIP (the whole suite, which runs this test; CI's entry point .ci/run): $c"
    skipped=$((skipped + 1)) ;;
  export)
    ckpt=$(newest_checkpoint) || exit 1
    e=${c//ckpt\/ckpt-000450000.h5/$ckpt}
    e=${e//\/scratch\/imagenet-shards\/train/$work/cifar10/train}
    e=${e// alexnet.pt / $work/alexnet.pt }
    [[ $e != *"/scratch/"* && $e != *" alexnet.pt"* ]] || fail "export: a README path was not replaced: $e"
    echo "(the checkpoint and dataset are the CIFAR-10 run's; python3 first on PATH has no packages)"
    run_logged "README command" "PATH=$work/bare/bin:\$PATH $e"; ran=$((ran + 1))
    { [ -s "$work/alexnet.pt" ] && [ -s "$work/alexnet.onnx" ]; } || fail "export wrote no alexnet.pt / alexnet.onnx"
    # The README's python block(s), on the exported model: images as the shards store them.
    awk '/^```python[[:space:]]*$/ { p = 1; next } p && /^```/ { p = 0; next } p' "$README" >"$work/block.py"
    [ -s "$work/block.py" ] || fail "README.md has no \`\`\`python block (the export's usage)"
    (cd "$work" && "$PY" - "$work/cifar10/test" "$work/block.py" <<'PYEOF') || fail "the README's python block"
import glob, os, sys
import h5py, numpy as np, torch
shard = sorted(glob.glob(os.path.join(sys.argv[1], "*.h5")))
shard = [s for s in shard if os.path.basename(s) != "dataset.h5"][0]
with h5py.File(shard, "r") as f:
    images = torch.from_numpy(np.asarray(f["images"][:8]))  # uint8 [N][H][W][3]
ns = {"torch": torch, "images": images}
exec(compile(open(sys.argv[2]).read(), "README.md python block", "exec"), ns)
logits = ns["logits"]
assert tuple(logits.shape) == (8, 10) and bool(torch.isfinite(logits).all()), logits
print("  ok: the README's python block gives logits", tuple(logits.shape))
PYEOF
    ;;
  filters)
    ckpt=$(newest_checkpoint) || exit 1
    e=${c//CHECKPOINT/$ckpt}
    e=${e// conv1.png / $work/conv1.png }
    e=${e//--csv conv1.csv/--csv $work/conv1.csv}
    run_logged "README command" "$e"; ran=$((ran + 1))
    { [ -s "$work/conv1.png" ] && [ -s "$work/conv1.csv" ]; } || fail "show_filters wrote no PNG/CSV" ;;
  skip:gpu)
    [[ $c == *--device=cuda* ]] || fail "skip:gpu for a command without --device=cuda: $c"
    echo "SKIP (needs a GPU): $c"; skipped=$((skipped + 1)) ;;
  skip:imagenet)
    [[ $c == */scratch/* ]] || fail "skip:imagenet for a command without /scratch/: $c"
    echo "SKIP (needs the ImageNet shards under /scratch/): $c"; skipped=$((skipped + 1)) ;;
  skip:mpirun8)
    [[ $c == "mpirun -np 8 "* && $c == */scratch/* ]] || fail "skip:mpirun8 for another command: $c"
    echo "SKIP (needs 8 ranks and the ImageNet shards): $c"; skipped=$((skipped + 1)) ;;
  *) fail "unknown action '$action' for: $c" ;;
  esac
done
echo "ok: README.md: $ran run, $checked checked without training, $skipped skipped with the reason printed"
