#!/usr/bin/env bash
# Trains with the given trainer flags, writing metrics, and checks that the mean loss of
# the last logged interval is at most FRACTION of the first one.
#   loss_falls.sh FRACTION TRAINER [flags...]
set -euo pipefail
fraction=$1; trainer=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$trainer" --metrics_file="$dir/m.jsonl" "$@"
# The loss of the first and last "train" records; each must be a positive number (a
# record whose loss the pattern does not capture makes the test fail, not pass as 0 <= 0).
loss_of() { grep -oE '"loss":[0-9][0-9.eE+-]*' | cut -d: -f2; }
first=$(grep '"kind":"train"' "$dir/m.jsonl" | head -n 1 | loss_of)
last=$(grep '"kind":"train"' "$dir/m.jsonl" | tail -n 1 | loss_of)
records=$(grep -c '"kind":"train"' "$dir/m.jsonl" || true)
echo "first interval loss $first, last interval loss $last ($records records), required ratio <= $fraction"
[ "$records" -ge 2 ] || { echo "FAIL: fewer than two train records" >&2; exit 1; }
awk -v a="$first" -v b="$last" -v f="$fraction" \
  'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && a == a + 0 && b == b + 0 && b <= a * f) }' || {
  echo "FAIL: the loss did not fall enough, or a loss was not a positive number" >&2; exit 1; }
echo ok
