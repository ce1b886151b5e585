#!/usr/bin/env bash
# scripts/show_filters.py as a user runs it: --help; the colour fraction of hand-made
# filters (grey edge and grey blob 0, pure red 2/3, red minus green 1) and its per-column
# grouping; a PNG and CSVs of a small AlexNet (--input_size=67 --columns=2) trained two
# CPU steps; --layer; and its errors (exit 2 with a message).
#   show_filters_test.sh TRAINER [PYTHON]   (default /usr/bin/python3)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRAINER=${1:?usage: show_filters_test.sh TRAINER [PYTHON]}
PY=${2:-/usr/bin/python3}
S=$ROOT/scripts/show_filters.py
# shellcheck disable=SC1091  # tests/skip_policy.sh: skip_or_fail
. "$HERE/../skip_policy.sh"
"$PY" -c 'import h5py, numpy, matplotlib' 2>/dev/null ||
  skip_or_fail "no h5py/numpy/matplotlib for $PY (python3-h5py python3-matplotlib)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export COLONNADE_CPU_THREADS=${COLONNADE_CPU_THREADS:-2}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

help=$("$PY" "$S" --help) || fail "--help"
for want in "--layer NAME" "--csv OUT.csv" "luminance direction" "OUT_columns.csv" \
            "consecutive blocks" "contrast-normalised"; do
  grep -q -- "$want" <<<"$help" || fail "--help does not mention '$want'"
done

# ---- hand-made filters: 6 filters 3x7x7 in 3 columns of 2 ----------------------------------
"$PY" - "$work/hand.h5" <<'PYEOF' || fail "writing the hand-made filters"
import sys
import h5py, numpy as np
y, x = np.mgrid[-3:4, -3:4]
blob = np.exp(-(x ** 2 + y ** 2) / 4.0)
edge = np.sign(x).astype(float) * blob              # vertical edge, odd in x
grey = lambda m: np.stack([m, m, m])                # equal R, G, B: luminance only
zero = np.zeros_like(blob)
w = np.stack([grey(edge), grey(blob),              # column 0: grey edge, grey blob
              np.stack([blob, zero, zero]),        # column 1: pure red blob ...
              np.stack([zero, 0.5 * edge, zero]),  # ... and a pure green edge
              grey(-blob),                         # column 2: dark grey blob ...
              np.stack([blob, -blob, zero])])      # ... and red minus green
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["model"] = np.bytes_("alexnet")
    f.attrs["columns"] = np.int64(3)
    f.attrs["input_channels"] = np.int64(3)
    f.create_dataset("params/conv1/weight", data=w.astype(np.float32))
PYEOF
out=$("$PY" "$S" "$work/hand.h5" "$work/hand.png" --csv "$work/hand.csv") || fail "hand-made: $out"
is_png "$work/hand.png" || fail "hand-made: no PNG"
"$PY" - "$work/hand.csv" "$work/hand_columns.csv" <<'PYEOF' || fail "hand-made statistics"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = [(0, 0.0), (0, 0.0), (1, 2 / 3), (1, 2 / 3), (2, 0.0), (2, 1.0)]
assert len(rows) == 6, rows
for r, (col, frac) in zip(rows, want):
    assert r["layer"] == "conv1", r
    assert int(r["column"]) == col, ("column", r)
    assert abs(float(r["colour_fraction"]) - frac) < 1e-6, ("colour fraction", r, frac)
cols = list(csv.DictReader(open(sys.argv[2])))
assert [int(c["column"]) for c in cols] == [0, 1, 2], cols
assert [int(c["first_filter"]) for c in cols] == [0, 2, 4], cols
for c, (mean, std) in zip(cols, [(0.0, 0.0), (2 / 3, 0.0), (0.5, 0.5)]):
    assert abs(float(c["mean"]) - mean) < 1e-6 and abs(float(c["std"]) - std) < 1e-6, c
assert [int(c["colour_dominated"]) for c in cols] == [0, 2, 1], cols
print("ok: hand-made filters")
PYEOF
# The printed table says the same.
grep -Eq "^ +5 +2 +1\.0000 " <<<"$out" || fail "per-filter row of filter 5 not printed: $out"
grep -Eq "^ +1 +2-3 +0\.6667 +0\.0000 " <<<"$out" || fail "column 1's row not printed: $out"

# ---- a trained checkpoint --------------------------------------------------------------
"$TRAINER" --model=alexnet --input_size=67 --columns=2 --data=synthetic --device=cpu \
  --steps=2 --batch_size=4 --synthetic_size=32 --num_classes=10 \
  --checkpoint_dir="$work/ck" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training"; }
ckpt=$(ls "$work"/ck/ckpt-*.h5)
out=$("$PY" "$S" "$ckpt" "$work/conv1.png" --csv "$work/conv1.csv") || fail "conv1: $out"
is_png "$work/conv1.png" || fail "conv1: no PNG"
grep -q "alexnet conv1, 96 filters 3x11x11, 2 column(s) of 48" <<<"$out" || fail "conv1 header: $out"
"$PY" - "$work/conv1.csv" "$work/conv1_columns.csv" <<'PYEOF' || fail "conv1 statistics"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 96
assert [int(r["column"]) for r in rows] == [0] * 48 + [1] * 48
assert all(0.0 <= float(r["colour_fraction"]) <= 1.0 for r in rows)
cols = list(csv.DictReader(open(sys.argv[2])))
assert [(int(c["first_filter"]), int(c["filters"])) for c in cols] == [(0, 48), (48, 48)]
# Near-random weights after two steps: about 2/3 (the expectation for random filters).
assert all(0.55 < float(c["mean"]) < 0.78 for c in cols), cols
print("ok: conv1 of a trained alexnet")
PYEOF
out=$("$PY" "$S" "$ckpt" "$work/conv2.png" --layer conv2 --csv "$work/conv2.csv") || fail "conv2: $out"
is_png "$work/conv2.png" || fail "conv2: no PNG"
grep -q "no colour statistic: the filters read 48 channels" <<<"$out" || fail "conv2: $out"
[ "$(sed -n 2p "$work/conv2.csv")" = "conv2,0,0,,$(sed -n 2p "$work/conv2.csv" | cut -d, -f5)" ] ||
  fail "conv2 CSV should leave the colour fraction empty: $(sed -n 2p "$work/conv2.csv")"

# ---- errors: exit 2 and a message naming the problem --------------------------------------
expect_error() {  # REGEX ARGS...
  local regex=$1 rc; shift
  "$PY" "$S" "$@" 2>"$work/err" >/dev/null; rc=$?
  if [ $rc != 2 ] || ! grep -q -- "$regex" "$work/err"; then
    fail "show_filters.py $* -> exit $rc: $(cat "$work/err")"
  fi
}
expect_error "not a convolution; convolutions: conv1, conv2, conv3, conv4, conv5" "$ckpt" "$work/x.png" --layer fc6
expect_error "no /params/nope/weight" "$ckpt" "$work/x.png" --layer nope
expect_error "no such file" "$work/missing.h5" "$work/x.png"
echo "not hdf5" >"$work/bad.h5"
expect_error "not an HDF5 file" "$work/bad.h5" "$work/x.png"
"$PY" -c 'import h5py, sys; h5py.File(sys.argv[1], "w").attrs["model"] = "x"' "$work/empty.h5"
expect_error "no /params group" "$work/empty.h5" "$work/x.png"
echo "ok: show_filters.py"
