#!/usr/bin/env bash
# Trains with the given trainer flags, writing metrics, and checks that the mean loss of
# the last logged interval is at most FRACTION of the first one.
#   loss_falls.sh FRACTION TRAINER [flags...]
set -euo pipefail
fraction=$1; trainer=$2; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$trainer" --metrics_file="$dir/m.jsonl" "$@"
first=$(grep '"kind":"train"' "$dir/m.jsonl" | head -n 1 | sed 's/.*"loss":\([-0-9.eE+]*\).*/\1/')
last=$(grep '"kind":"train"' "$dir/m.jsonl" | tail -n 1 | sed 's/.*"loss":\([-0-9.eE+]*\).*/\1/')
echo "first interval loss $first, last interval loss $last, required ratio <= $fraction"
awk -v a="$first" -v b="$last" -v f="$fraction" 'BEGIN { exit !(b <= a * f) }' || {
  echo "FAIL: the loss did not fall enough" >&2; exit 1; }
echo ok
