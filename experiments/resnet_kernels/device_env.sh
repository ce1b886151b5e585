# Sourced by this folder's device scripts: ROOT (the checkout), B (.gpu_bin with the binary
# folders unpacked from each carried .gpu_bin/pack/*.tar.xz: bins.tar.xz holds before/ and
# after/, ws.tar.xz ws/), and Abseil's Debian packages (.deps; the device machine has none)
# extracted to /opt/absl and on LD_LIBRARY_PATH with the carried libjpeg (.deps/lib); say().
# shellcheck shell=bash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$ROOT/.gpu_bin
for pack in "$B"/pack/*.tar.xz; do
  [ -f "$pack" ] || continue
  stamp=$B/.unpacked.$(basename "$pack").$(stat -c %Y "$pack")
  [ -f "$stamp" ] || { tar xJf "$pack" -C "$B" && touch "$stamp"; }
done
if [ ! -d /opt/absl/usr ]; then
  for deb in "$ROOT"/.deps/libabsl*.deb; do dpkg -x "$deb" /opt/absl; done
fi
export LD_LIBRARY_PATH=/opt/absl/usr/lib/x86_64-linux-gnu:$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
# say MESSAGE: a timestamped line on stderr and in the calling script's $OUT/summary.txt.
say() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "${OUT:?OUT: the output folder}/summary.txt" >&2; }
