#!/usr/bin/env bash
# make_shards and the trainer on bad data inputs: absurd flags, FIFOs, failed conversions,
# unreadable shards. One case per call:   data_inputs.sh CASE BUILD_DIR
# Cases: bad_flags, fifo_input, failure_leaves_nothing (make_shards), unreadable_shards
#        (trainer)
# Every run is under an address-space limit and a timeout: before the fixes some of these
# inputs made a tool allocate gigabytes or block forever in open().
set -uo pipefail
case_name=$1; build=$2
MS="$build/make_shards"; T="$build/trainer"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# run_limited SECONDS CMD...: runs CMD with 4 GiB of address space; sets $out and $rc.
run_limited() {
  local secs=$1; shift
  out=$( (ulimit -v 4194304; timeout -s KILL "$secs" "$@") 2>&1 ); rc=$?
}
# expect_usage_error PATTERN CMD...: exit 2 and exactly one line matching PATTERN.
expect_usage_error() {
  local pattern=$1; shift
  run_limited 60 "$@"
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $* :: $out"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "not one line: $* :: $out"
  printf '%s\n' "$out" | grep -Eq -- "$pattern" || fail "no /$pattern/: $* :: $out"
  echo "ok (exit 2): $out"
}
synthetic() { "$MS" --source=synthetic --size=64 --test_size=0 --height=32 --width=32 \
                --progress=false --output="$1" >/dev/null || fail "make_shards synthetic"; }

case $case_name in
bad_flags)
  mkdir -p "$work/tree/a"
  printf 'not an image' > "$work/tree/a/x.jpg"
  F=(--source=folder --input="$work/tree" --output="$work/out" --progress=false)
  S=(--source=synthetic --output="$work/out" --progress=false --size=8 --test_size=0)
  expect_usage_error '^make_shards: --resize=20000: 20000x20000 is larger than the limit' \
    "$MS" "${F[@]}" --resize=20000
  expect_usage_error '^make_shards: --resize_exact=65536x65536: 65536x65536 is larger' \
    "$MS" "${F[@]}" --resize_exact=65536x65536
  expect_usage_error '^make_shards: --resize_exact=12000x12000: .*limit of 134217728 pixels' \
    "$MS" "${F[@]}" --resize_exact=12000x12000
  expect_usage_error '^make_shards: --threads must be in 0..1024' "$MS" "${F[@]}" --threads=100000
  expect_usage_error '^make_shards: --threads must be in 0..1024' "$MS" "${F[@]}" --threads=-3
  expect_usage_error '^make_shards: --noise must be in 0..255' "$MS" "${S[@]}" --noise=nan
  expect_usage_error '^make_shards: --noise must be in 0..255' "$MS" "${S[@]}" --noise=-1
  expect_usage_error '^make_shards: --noise must be in 0..255' "$MS" "${S[@]}" --noise=1e300
  expect_usage_error '^make_shards: --height x --width: 100000x32 is larger than the limit' \
    "$MS" "${S[@]}" --height=100000
  expect_usage_error '^make_shards: --height and --width must be > 0' "$MS" "${S[@]}" --width=-4
  expect_usage_error '^make_shards: --size must be in 1..2147483647' "$MS" "${S[@]}" --size=-1
  expect_usage_error '^make_shards: --size must be in 1..2147483647' "$MS" "${S[@]}" \
    --size=3000000000
  expect_usage_error '^make_shards: --test_size must be in 0..2147483647' "$MS" "${S[@]}" \
    --test_size=-1
  expect_usage_error '^make_shards: --classes must be in 1..16777216' "$MS" "${S[@]}" \
    --classes=100000000
  expect_usage_error '^make_shards: --shard_size must be in 1..2147483647' "$MS" "${S[@]}" \
    --shard_size=-5
  expect_usage_error '^make_shards: --val_fraction must be in \[0, 1\)' "$MS" "${F[@]}" \
    --val_fraction=nan
  expect_usage_error '^make_shards: environment variable COLONNADE_MAX_IMAGE_SIDE=.abc. is not' \
    env COLONNADE_MAX_IMAGE_SIDE=abc "$MS" "${S[@]}"
  [ ! -e "$work/out" ] || fail "a refused command wrote $work/out"
  ;;
fifo_input)
  # A FIFO named *.jpg among the images is never opened for reading (before: open()
  # blocked forever, here killed by the timeout).
  mkdir -p "$work/tree/a"
  mkfifo "$work/tree/a/pipe.jpg"
  # Without --resize the size comes from the first decodable image: there is none.
  run_limited 60 "$MS" --source=folder --input="$work/tree" --output="$work/out" \
    --progress=false
  [ "$rc" = 1 ] || fail "exit $rc, expected 1 (no decodable image): $out"
  [ "$out" = "make_shards: $work/tree: no decodable image found" ] || fail "message: $out"
  # With --strict the FIFO itself is the fatal error, one line naming it.
  run_limited 60 "$MS" --source=folder --input="$work/tree" --output="$work/out2" \
    --progress=false --resize=16 --strict
  [ "$rc" = 1 ] || fail "strict: exit $rc, expected 1: $out"
  [ "$out" = "make_shards: $work/tree/a/pipe.jpg: is a FIFO, not a regular file" ] \
    || fail "strict message: $out"
  [ -z "$(find "$work" -name 'dataset.h5*' -o -name 'shard-*')" ] || fail "files left"
  ;;
failure_leaves_nothing)
  # --height=100000 used to write the whole dataset, fail its own read-back and leave an
  # invalid dataset.h5 (exit 1): now refused up front (exit 2), nothing written. (A
  # conversion failing midway is ConvertersTest.FailedConversionLeavesNoDatasetBehind.)
  run_limited 120 "$MS" --source=synthetic --size=4 --test_size=2 --height=100000 --width=4 \
    --classes=2 --progress=false --output="$work/tall"
  [ "$rc" = 2 ] || fail "tall: exit $rc, expected 2: $out"
  [ -z "$(find "$work/tall" -name 'dataset.h5*' -o -name 'shard-*' 2>/dev/null)" ] \
    || fail "tall: files left: $(find "$work/tall")"
  ;;
unreadable_shards)
  # docs/OPERATIONS.md: unreadable data is exit 1 (a runtime failure), a missing data
  # directory exit 2. Each message names the file.
  TR=(--model=cifar10-80sec --device=cpu --steps=1 --batch_size=8 --cpu_threads=1)
  synthetic "$work/ds"
  shard="$work/ds/train/shard-00000.h5"
  head -c 3000 "$shard" > "$work/trunc" && mv "$work/trunc" "$shard"
  run_limited 120 "$T" "${TR[@]}" --data="$work/ds/train"
  [ "$rc" = 1 ] || fail "truncated shard: exit $rc, expected 1: $out"
  printf '%s\n' "$out" | grep -q "$shard: " || fail "truncated shard: message: $out"
  rm "$shard"; mkfifo "$shard"
  run_limited 120 "$T" "${TR[@]}" --data="$work/ds/train"
  [ "$rc" = 1 ] || fail "FIFO shard: exit $rc, expected 1: $out"
  printf '%s\n' "$out" | grep -q "$shard: is a FIFO, not a regular file" \
    || fail "FIFO shard: message: $out"
  run_limited 120 "$T" "${TR[@]}" --data="$work/nonexistent"
  [ "$rc" = 2 ] || fail "missing directory: exit $rc, expected 2: $out"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "PASS: $case_name"
