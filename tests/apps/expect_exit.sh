#!/usr/bin/env bash
# Runs a command and checks its exit code and that its output (stdout + stderr) matches a
# regular expression.   expect_exit.sh CODE REGEX [--stderr_lines=N] -- command args...
# With --stderr_lines=N, stderr must also be exactly N lines (a usage error is one line).
set -u  # the regex is matched against the whole output (grep -z), so .* spans lines
want=$1; regex=$2; shift 2
stderr_lines=
case "${1:-}" in --stderr_lines=*) stderr_lines=${1#*=}; shift ;; esac
[ "$1" = "--" ] && shift
if [ -z "$stderr_lines" ]; then
  out=$("$@" 2>&1); got=$?
else
  err_file=$(mktemp)
  trap 'rm -f "$err_file"' EXIT
  out=$("$@" 2>"$err_file"); got=$?
  err=$(cat "$err_file")
  out=$(printf '%s\n%s' "$out" "$err")
  lines=$(wc -l < "$err_file")
  if [ "$lines" != "$stderr_lines" ]; then
    printf '%s\n' "$err" | tail -n 20
    echo "FAIL: $lines lines on stderr, expected $stderr_lines: $*" >&2
    exit 1
  fi
fi
printf '%s\n' "$out" | tail -n 20
if [ "$got" != "$want" ]; then
  echo "FAIL: exit code $got, expected $want: $*" >&2
  exit 1
fi
if ! printf "%s\n" "$out" | grep -Ezq -- "$regex"; then
  echo "FAIL: output does not match /$regex/" >&2
  exit 1
fi
echo "ok: exit $got and output matches /$regex/"
