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
# The picture as the last argument (as show_filters.py and export_torch.py take theirs).
out=$("$PY" "$P" "$m" "$work/one.png" 2>&1) || fail "positional output: $out"
is_png "$work/one.png" || fail "positional output: not a PNG"
grep -q "wrote $work/one.png (5 records from 1 file(s)" <<<"$out" || fail "positional output: $out"
# Two runs overlaid against the epoch.
cp "$m" "$work/b.jsonl"
out=$("$PY" "$P" "$m" "$work/b.jsonl" "$work/both.png" --labels a,b --x epoch 2>&1) ||
  fail "overlay: $out"
is_png "$work/both.png" || fail "overlay is not a PNG"
grep -q "wrote $work/both.png (10 records from 2 file(s)" <<<"$out" || fail "overlay: $out"
# -o still works, with a note on stderr that it is deprecated.
"$PY" "$P" "$m" -o "$work/old.png" >"$work/old.out" 2>"$work/old.err" || fail "-o: $(cat "$work/old.err")"
is_png "$work/old.png" || fail "-o: not a PNG"
grep -q "note: -o/--output is deprecated; give the picture as the last argument" "$work/old.err" ||
  fail "-o without the deprecation note: $(cat "$work/old.err")"
# A python3 first on PATH without matplotlib (a venv made from Debian's, which does not see
# its dist-packages): the script re-runs itself under /usr/bin/python3 (scripts/_python.py).
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  mkdir -p "$work/bare/bin"
  ln -s /usr/bin/python3 "$work/bare/bin/python3"
  printf 'home = /usr/bin\ninclude-system-site-packages = false\n' >"$work/bare/pyvenv.cfg"
  "$work/bare/bin/python3" -c 'import matplotlib' 2>/dev/null && fail "the bare python3 has matplotlib"
  out=$(PATH=$work/bare/bin:$PATH "$P" "$m" "$work/bare.png" 2>&1) || fail "re-run under /usr/bin/python3: $out"
  is_png "$work/bare.png" || fail "re-run under /usr/bin/python3: no PNG: $out"
fi
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
expect_error "the picture is given twice" "$m" "$work/x.png" -o "$work/y.png"
expect_error "no metrics file given, only the picture" "$work/x.png"
echo "ok: plot_metrics.py"
