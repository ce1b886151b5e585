#!/usr/bin/env bash
# `bash -n` and shellcheck on shell scripts (the Slurm batch scripts and their tests), and a
# byte-compile of scripts/plot_metrics.py.   lint_scripts.sh FILE...
# The shellcheck package is installed with apt-get when absent and we are root; exit 77 (skip) only
# when it cannot be had.
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }
if ! command -v shellcheck >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends shellcheck >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 &&
        apt-get install -y -qq --no-install-recommends shellcheck >/dev/null 2>&1; }
  fi
  # shellcheck source=../skip_policy.sh
  command -v shellcheck >/dev/null || { . "$(dirname "$0")/../skip_policy.sh";
    skip_or_fail "shellcheck is not installed and cannot be"; }
fi
status=0
for f in "$@"; do
  case $f in
  *.py)
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" ||
      { echo "FAIL: $f does not parse"; status=1; continue; } ;;
  *)
    bash -n "$f" || { echo "FAIL: bash -n $f"; status=1; continue; }
    shellcheck --shell=bash -x --source-path=SCRIPTDIR "$f" || { echo "FAIL: shellcheck $f"; status=1; continue; } ;;
  esac
  echo "ok: $f"
done
exit $status
