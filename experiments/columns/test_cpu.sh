#!/usr/bin/env bash
# The columns experiment end to end on the CPU at a tiny scale, so that the GPU call cannot
# fail on a typo: prepare_data.sh with a 2 MiB budget (balanced, within budget, val storing
# the training mean), then run.sh on 67x67 synthetic JPEG shards with DEVICE=cpu, batch 8,
# 4 steps, for RUNS (default c2s1 c1s1 c4s1: every column count), and its outputs.
#   experiments/columns/test_cpu.sh TRAINER MAKE_SHARDS [PYTHON]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRAINER=${1:?usage: test_cpu.sh TRAINER MAKE_SHARDS [PYTHON]}
MAKE_SHARDS=${2:?usage: test_cpu.sh TRAINER MAKE_SHARDS [PYTHON]}
PY=${3:-/usr/bin/python3}
# shellcheck disable=SC1091  # tests/skip_policy.sh: skip_or_fail
. "$ROOT/tests/skip_policy.sh"
"$PY" -c 'import h5py, numpy, matplotlib' 2>/dev/null ||
  skip_or_fail "no h5py/numpy/matplotlib for $PY"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- prepare_data.sh at a 2 MiB budget (1.2 MB of it the two mean images) ------------------------------------------------------
src=$ROOT/../shared/data/imagenette-224.tar.gz
if [ ! -f "$src" ] && common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  src=$(dirname "$common")/../shared/data/imagenette-224.tar.gz
fi
[ -f "$src" ] || skip_or_fail "no ../shared/data/imagenette-224.tar.gz"
out=$(SRC=$src BUDGET_MIB=2 VAL_PER_CLASS=2 THREADS=2 "$HERE/prepare_data.sh" "$work/data" "$MAKE_SHARDS") ||
  fail "prepare_data.sh: $out"
echo "$out"
"$PY" - "$work/data" <<'PYEOF' || fail "prepare_data.sh output"
import os, sys, h5py, numpy as np
d = sys.argv[1]
total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
assert total <= 2 * 1048576, total
tr, va = h5py.File(d + "/train/dataset.h5", "r"), h5py.File(d + "/val/dataset.h5", "r")
for f in (tr, va):
    assert f.attrs["encoding"] in (b"jpeg", "jpeg") and int(f.attrs["height"]) == 224, dict(f.attrs)
    assert int(f.attrs["num_classes"]) == 10
counts = tr["class_counts"][...]
assert counts.min() == counts.max() >= 1, counts          # balanced
assert (va["class_counts"][...] == 2).all()
assert np.array_equal(tr["mean_image"][...], va["mean_image"][...])  # the training mean
print("ok: prepare_data.sh, %d bytes, %d train images per class" % (total, counts[0]))
PYEOF

# ---- run.sh on the CPU ---------------------------------------------------------------------
"$MAKE_SHARDS" --source=synthetic --output="$work/syn" --height=67 --width=67 --size=24 \
  --test_size=10 --classes=10 --progress=false >/dev/null 2>&1 || fail "make_shards synthetic"
mkdir -p "$work/syn/val"
mv "$work/syn/test"/* "$work/syn/val/"
mkdir -p "$work/build"
ln -s "$(readlink -f "$TRAINER")" "$work/build/trainer"
read -r -a runs <<<"${RUNS:-c2s1 c1s1 c4s1}"
DATA=$work/syn DEVICE=cpu BATCH=8 STEPS=4 EVAL_EPOCHS=1 THREADS=1 RUNS="${runs[*]}" PYTHON=$PY \
  COMMIT=test-commit "$HERE/run.sh" "$work/out" "$work/build" >"$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "run.sh"; }
[ "${KEEP:-}" ] && cp -r "$work/out" "$KEEP"
R=$work/out/results
for run in "${runs[@]}"; do
  for f in "$run.jsonl" "$run.log" "${run}_conv1.png" "${run}_conv1.csv" \
           "${run}_conv1_columns.csv" "${run}_conv1.h5"; do
    [ -s "$R/$f" ] || { cat "$work/run.log"; fail "run.sh wrote no $f"; }
  done
  "$PY" "$ROOT/scripts/show_filters.py" "$R/${run}_conv1.h5" "$work/again.png" >/dev/null ||
    fail "show_filters.py cannot read ${run}_conv1.h5"
done
"$PY" - "$R" "${runs[@]}" <<'PYEOF' || { cat "$work/run.log"; fail "run.sh records"; }
import json, sys
R, runs = sys.argv[1], sys.argv[2:]
for run in runs:
    recs = [json.loads(l) for l in open("%s/%s.jsonl" % (R, run))]
    k = int(run[1:].split("s")[0])
    assert all(r["commit"] == "test-commit" and r["run"] == run for r in recs), run
    last = recs[-1]
    assert last["kind"] == "run" and last["exit"] == 0 and last["steps_done"] == 4, last
    assert last["checkpoint_step"] == 4 and not last["stopped_by_timeout"], last
    assert last["columns"] == k and len(last["conv1_columns"]) == k, last
    assert sum(c["filters"] for c in last["conv1_columns"]) == 96, last
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [3, 4], run
    assert "heldout_top1_error" in last, last
table = open(R + "/summary.md").read()
for run in runs:
    assert "| %s |" % run in table, table
print("ok: run.sh records and summary")
PYEOF
[ -s "$R/curves.png" ] || fail "no curves.png"
listing=$(tar tzf "$work/out/results.tgz") || fail "no results.tgz"
grep -q "results/summary.md" <<<"$listing" || fail "results.tgz lacks summary.md"
echo "ok: columns experiment on the CPU (${runs[*]})"
