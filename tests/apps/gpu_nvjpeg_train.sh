#!/usr/bin/env bash
# On a GPU with nvJPEG in the build, --jpeg_decoder=nvjpeg trains on JPEG shards with the
# images decoded on the device: the banner names nvJPEG's backend, the run finishes, and
# its losses follow the host-decoded run's (the pixels differ by a few levels on some
# pixels, so the losses agree to about 1%, not bitwise: the check allows 5%); auto picks
# nvJPEG with at most 4 data threads and the host decoder with more. Skips (exit 77)
# without a GPU or without nvJPEG in the build.
#   gpu_nvjpeg_train.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then echo "SKIP: no GPU"; exit 77; fi
lib=$(grep "^NVJPEG_LIBRARY:FILEPATH=" "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2)
case "$lib" in ""|*NOTFOUND) echo "SKIP: this build has no nvJPEG"; exit 77 ;; esac
"$build/make_shards" --source=synthetic --output="$work/shards" --size=600 --test_size=10 \
  --height=40 --width=40 --encoding=jpeg > "$work/ms.log" 2>&1 ||
  { cat "$work/ms.log"; fail "make_shards"; }
RUN=(--model=cifar10-80sec --device=cuda --batch_size=64 --steps=40 --seed=5 --crop=32
     --mirror --mean=image --log_every=10 --keep_checkpoints=1 --resume=none
     --data="$work/shards/train")
for dec in host nvjpeg; do
  "$build/trainer" "${RUN[@]}" --jpeg_decoder=$dec --checkpoint_dir="$work/$dec" \
    > "$work/$dec.log" 2>&1 || { cat "$work/$dec.log"; fail "--jpeg_decoder=$dec"; }
done
grep -q "decoded by nvJPEG" "$work/nvjpeg.log" || { cat "$work/nvjpeg.log"; fail "the banner does not name nvJPEG"; }
grep -q "decoded by nvJPEG" "$work/host.log" && fail "--jpeg_decoder=host decoded with nvJPEG"
grep "feed       GPU" "$work/nvjpeg.log"
# auto: nvJPEG with at most 4 decoding threads, the host decoder with more.
for th in 4 5; do
  "$build/trainer" "${RUN[@]}" --steps=2 --data_threads=$th --checkpoint_dir="$work/auto$th" \
    > "$work/auto$th.log" 2>&1 || { cat "$work/auto$th.log"; fail "--jpeg_decoder=auto"; }
done
grep -q "decoded by nvJPEG" "$work/auto4.log" || fail "auto with 4 threads did not use nvJPEG"
grep -q "decoded by nvJPEG" "$work/auto5.log" && fail "auto with 5 threads used nvJPEG"
# The last logged training loss of each run ("loss 2.1234" in the progress lines).
loss() { grep -o "loss [0-9.]*" "$1" | tail -1 | cut -d' ' -f2; }
lh=$(loss "$work/host.log"); ln=$(loss "$work/nvjpeg.log")
[ -n "$lh" ] && [ -n "$ln" ] || fail "no loss in the logs"
echo "last loss: host $lh, nvjpeg $ln"
/usr/bin/env awk -v a="$lh" -v b="$ln" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * a) }' ||
  fail "losses differ by more than 5%: host $lh, nvjpeg $ln"
echo "PASS: --jpeg_decoder=nvjpeg trains like the host decoder"
