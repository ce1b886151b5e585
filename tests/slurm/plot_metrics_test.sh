#!/usr/bin/env bash
# scripts/plot_metrics.py as a user runs it: --help, a PNG from a metrics file written by a
# requeued job (steps repeated, eval records, a stray line), overlays, and its errors.
#   plot_metrics_test.sh [PYTHON]   (default /usr/bin/python3, which has Debian's matplotlib)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${1:-/usr/bin/python3}
P=$ROOT/scripts/plot_metrics.py
# shellcheck source=../skip_policy.sh
. "$(dirname "$0")/../skip_policy.sh"
"$PY" -c 'import matplotlib' 2>/dev/null || skip_or_fail "no matplotlib for $PY (python3-matplotlib)"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

"$PY" "$P" --help | grep -q -- "--x {step,epoch}" || fail "--help"
mkdir -p "$work/run"
m=$work/run/metrics.jsonl
{
for s in 10 20 30; do  # first run, stopped after step 30 ...
  echo "{\"kind\":\"train\",\"step\":$s,\"epoch\":0.$s,\"loss\":2.$s,\"top1_error\":0.8,\"top5_error\":0.3,\"lr\":0.01,\"images_per_sec\":100.0,\"data_wait_sec\":0.1,\"comm_wait_sec\":0.2,\"elapsed_sec\":$s}"
done
echo "not json"
for s in 30 40; do  # ... requeued, resumed from step 20: step 30 again, the clock restarts
  echo "{\"kind\":\"train\",\"step\":$s,\"epoch\":0.$s,\"loss\":1.$s,\"top1_error\":0.5,\"top5_error\":0.1,\"lr\":0.001,\"images_per_sec\":90.0,\"data_wait_sec\":0.1,\"comm_wait_sec\":0.2,\"elapsed_sec\":$((s - 25))}"
done
echo '{"kind":"eval","step":40,"epoch":0.4,"loss":1.5,"top1_error":0.55,"top5_error":0.12,"images":1000}'
} >"$m"
out=$("$PY" "$P" "$m" 2>&1) || fail "plot: $out"
# 4 train steps (step 30 counted once) + 1 eval; the resume between steps 20 and 30 found.
grep -q "wrote $work/run/metrics.png (5 records from 1 file(s), 1 resume(s) marked)" <<<"$out" ||
  fail "unexpected: $out"
grep -q "skipped 1 line" <<<"$out" || fail "the stray line was not reported: $out"
is_png "$work/run/metrics.png" || fail "not a PNG"
# Two runs overlaid against the epoch.
cp "$m" "$work/b.jsonl"
"$PY" "$P" "$m" "$work/b.jsonl" --labels a,b --x epoch -o "$work/both.png" >/dev/null || fail "overlay"
is_png "$work/both.png" || fail "overlay is not a PNG"
# Errors: exit 2 with a message naming the problem.
# expect_error REGEX ARGS...: exit 2 and REGEX on stderr.
expect_error() {
  local regex=$1 rc; shift
  "$PY" "$P" "$@" 2>"$work/err" >/dev/null; rc=$?
  if [ $rc != 2 ] || ! grep -q -- "$regex" "$work/err"; then
    fail "plot_metrics.py $* -> exit $rc: $(cat "$work/err")"
  fi
}
expect_error "cannot read" "$work/missing.jsonl"
echo '{"foo":1}' >"$work/empty.jsonl"
expect_error "no train or eval records" "$work/empty.jsonl"
expect_error "2 names for 1 files" "$m" --labels a,b
echo "ok: plot_metrics.py"
