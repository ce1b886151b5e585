# Sourced by this folder's device scripts: ROOT (the checkout), B (.gpu_bin with before/ and
# after/ unpacked from the carried .gpu_bin/pack/bins.tar.xz, where it travelled), and
# Abseil's Debian packages (.deps; the device machine has none) extracted to /opt/absl and on
# LD_LIBRARY_PATH with the carried libjpeg (.deps/lib).
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$ROOT/.gpu_bin
if [ ! -x "$B/after/bench_train" ] && [ -f "$B/pack/bins.tar.xz" ]; then
  tar xJf "$B/pack/bins.tar.xz" -C "$B"
fi
if [ ! -d /opt/absl/usr ]; then
  for deb in "$ROOT"/.deps/libabsl*.deb; do dpkg -x "$deb" /opt/absl; done
fi
export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
