#!/usr/bin/env bash
# Runs a command and checks its exit code and that its output (stdout + stderr) matches a
# regular expression.   expect_exit.sh CODE REGEX -- command args...
set -u  # the regex is matched against the whole output (grep -z), so .* spans lines
want=$1; regex=$2; shift 2
[ "$1" = "--" ] && shift
out=$("$@" 2>&1); got=$?
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
