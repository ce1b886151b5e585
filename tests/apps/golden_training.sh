#!/usr/bin/env bash
# CPU training results pinned across refactors: 20 steps of AlexNet-67 (two columns) and of
# cifar10-80sec from one seed must end in exactly the parameters and optimizer state the
# tree before the house redesign (issue 13) produced, and a checkpoint written by that old
# tree at step 10 (tests/apps/golden/cifar10_80sec_step10.h5) must resume to the same
# step-20 state. Bitwise CPU results depend on the OpenBLAS kernel and thread counts, so
# both are pinned (Prescott runs on every x86-64 CPU).
#   golden_training.sh BUILD_DIR [--print]     (--print: print the hashes, compare nothing)
set -uo pipefail
build=$1; mode=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/golden
export OPENBLAS_CORETYPE=Prescott OPENBLAS_NUM_THREADS=1 COLONNADE_CPU_THREADS=2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../skip_policy.sh
. "$here/../skip_policy.sh"
/usr/bin/python3 -c "import h5py" 2>/dev/null || skip_or_fail "python3-h5py for /usr/bin/python3"

# sha256 over every dataset under /params and /optimizer (sorted names, raw bytes): the
# state that determines the rest of training.
state_hash() {
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, sys, h5py
h = hashlib.sha256()
with h5py.File(sys.argv[1], "r") as f:
    names = []
    for top in ("params", "optimizer"):
        if top in f:
            f[top].visititems(lambda n, d, t=top: names.append(f"{t}/{n}")
                              if isinstance(d, h5py.Dataset) else None)
    for n in sorted(names):
        h.update(n.encode())
        h.update(f[n][...].tobytes())
print(h.hexdigest())
PY
}
ALEX=(--model=alexnet --input_size=67 --num_classes=10 --batch_size=8 --synthetic_size=64
      --lr=0.001)
CIFAR=(--model=cifar10-80sec --batch_size=32 --synthetic_size=512)
COMMON=(--data=synthetic --device=cpu --seed=3 --log_every=10 --keep_checkpoints=1)
"$build/trainer" "${ALEX[@]}" "${COMMON[@]}" --steps=20 --checkpoint_dir="$work/alex" \
  > "$work/alex.log" 2>&1 || { cat "$work/alex.log"; fail "alexnet run"; }
"$build/trainer" "${CIFAR[@]}" "${COMMON[@]}" --steps=20 --checkpoint_dir="$work/cifar" \
  > "$work/cifar.log" 2>&1 || { cat "$work/cifar.log"; fail "cifar10-80sec run"; }
alex=$(state_hash "$work/alex/ckpt-000000020.h5") || fail "hash"
cifar=$(state_hash "$work/cifar/ckpt-000000020.h5") || fail "hash"
if [ "$mode" = --print ]; then
  "$build/trainer" "${CIFAR[@]}" "${COMMON[@]}" --steps=10 --checkpoint_dir="$work/c10" \
    > /dev/null 2>&1 || fail "step-10 run"
  echo "alexnet67_20 $alex"; echo "cifar10_80sec_20 $cifar"
  echo "step-10 checkpoint: $work/c10/ckpt-000000010.h5 (copy it to $golden/cifar10_80sec_step10.h5)"
  cp "$work/c10/ckpt-000000010.h5" "${GOLDEN_OUT:-/tmp}/cifar10_80sec_step10.h5"
  exit 0
fi
want() { awk -v k="$1" '$1 == k { print $2 }' "$golden/hashes.txt"; }
[ "$alex" = "$(want alexnet67_20)" ] || fail "AlexNet-67 after 20 steps: $alex, pinned $(want alexnet67_20)"
[ "$cifar" = "$(want cifar10_80sec_20)" ] || fail "cifar10-80sec after 20 steps: $cifar, pinned $(want cifar10_80sec_20)"
# The old tree's step-10 checkpoint resumes here and ends where the straight run does.
mkdir -p "$work/resume"
cp "$golden/cifar10_80sec_step10.h5" "$work/resume/ckpt-000000010.h5"
"$build/trainer" "${CIFAR[@]}" "${COMMON[@]}" --steps=20 --checkpoint_dir="$work/resume" \
  > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume from the old checkpoint"; }
grep -q "resumed    from $work/resume/ckpt-000000010.h5 at step 10" "$work/resume.log" \
  || fail "did not resume from the old tree's checkpoint: $(grep -E 'resumed|warning' "$work/resume.log")"
resumed=$(state_hash "$work/resume/ckpt-000000020.h5") || fail "hash"
[ "$resumed" = "$cifar" ] || fail "resumed from the old checkpoint: $resumed, straight run $cifar"
echo "ok: AlexNet-67 and cifar10-80sec bitwise as pinned; the old checkpoint resumes to the same state"
