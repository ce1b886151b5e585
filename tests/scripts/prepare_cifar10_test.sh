#!/usr/bin/env bash
# scripts/prepare_cifar10.sh's arguments, without converting anything (no data needed):
# --help, usage errors (exit 2 with the usage), and where it looks for the archive:
# --data_dir=DIR and --data_dir DIR over $COLONNADE_SHARED_DATA over ../shared/data beside
# the repository. A fake archive and an OUTDIR that already holds both datasets make the
# script stop at "already exist" (exit 0) once it has found the archive; a folder without
# the archive is exit 1 naming the path it looked at. The conversion itself runs in
# readme_commands_test.sh and trainer.cifar10_80sec_one_epoch.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S=$ROOT/scripts/prepare_cifar10.sh
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
# expect CODE REGEX -- command...: exit code and a line of the output.
expect() {
  local want=$1 regex=$2; shift 3
  local out got
  out=$("$@" 2>&1); got=$?
  if [ "$got" != "$want" ] || ! grep -Eq -- "$regex" <<<"$out"; then
    echo "FAIL: $* -> exit $got (want $want), output:"; echo "$out"; fails=$((fails + 1))
  else
    echo "ok: exit $got /$regex/: ${*:2}"
  fi
}
[ -x "$S" ] || { echo "FAIL: $S is not executable"; exit 1; }
mkdir -p "$work/data" "$work/env" "$work/out/train" "$work/out/test"
: >"$work/data/cifar10-jpeg.tar.gz"
: >"$work/env/cifar10-jpeg.tar.gz"
: >"$work/out/train/dataset.h5"
: >"$work/out/test/dataset.h5"
export MAKE_SHARDS=/bin/true  # never run: the datasets "exist"
default=$(cd "$ROOT/.." && pwd)/shared/data

expect 0 "usage: prepare_cifar10.sh \[--data_dir=DIR\] OUTDIR" -- "$S" --help
expect 0 "else ../shared/data beside the repository: $default" -- "$S" -h
expect 2 "no OUTDIR given" -- "$S"
expect 2 "usage: prepare_cifar10.sh" -- "$S"
expect 2 "unknown option --data-dir=x" -- "$S" --data-dir=x "$work/out"
expect 2 "--data_dir needs a directory" -- "$S" "$work/out" --data_dir
expect 2 "one OUTDIR only" -- "$S" "$work/out" "$work/other"
expect 2 "--data_dir is empty" -- "$S" --data_dir= "$work/out"
# --data_dir, either form, before or after OUTDIR
expect 0 "already exist" -- env -u COLONNADE_SHARED_DATA "$S" --data_dir="$work/data" "$work/out"
expect 0 "already exist" -- env -u COLONNADE_SHARED_DATA "$S" "$work/out" --data_dir "$work/data"
expect 1 "$work/nowhere/cifar10-jpeg.tar.gz not found \(--data_dir=DIR names" -- \
  env -u COLONNADE_SHARED_DATA "$S" --data_dir="$work/nowhere" "$work/out"
# --data_dir wins over the environment, which wins over the default
expect 1 "$work/nowhere/cifar10-jpeg.tar.gz not found" -- \
  env COLONNADE_SHARED_DATA="$work/env" "$S" --data_dir="$work/nowhere" "$work/out"
expect 0 "already exist" -- env COLONNADE_SHARED_DATA="$work/env" "$S" "$work/out"
expect 1 "$work/nowhere/cifar10-jpeg.tar.gz not found" -- \
  env COLONNADE_SHARED_DATA="$work/nowhere" "$S" "$work/out"
# The default: ../shared/data beside the repository (the test does not depend on its
# presence: either it finds the archive there or it names that path).
expect_default() {
  if [ -f "$default/cifar10-jpeg.tar.gz" ]; then
    expect 0 "already exist" -- env -u COLONNADE_SHARED_DATA "$S" "$work/out"
  else
    expect 1 "$default/cifar10-jpeg.tar.gz not found" -- env -u COLONNADE_SHARED_DATA "$S" "$work/out"
  fi
}
expect_default
[ $fails = 0 ] || { echo "$fails check(s) failed"; exit 1; }
