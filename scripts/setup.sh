#!/usr/bin/env bash
# Installs Colonnade's build and run dependencies on Debian 12 (as root) and builds the
# project into build/. Safe to run again: installed packages are skipped, the build is
# incremental. CUDA is compiled when /usr/local/cuda/bin/nvcc (or CUDACXX) exists.
#
#   scripts/setup.sh              # install + configure + build
#   BUILD_DIR=out scripts/setup.sh
#   COLONNADE_CUDA=OFF scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config git
  libopenmpi-dev openmpi-bin libhdf5-dev libabsl-dev libgtest-dev libgmock-dev
  libjpeg-dev libpng-dev libopenblas-dev
  python3 python3-h5py python3-numpy python3-matplotlib python3-pil
  python3-torch python3-onnx  # torch, onnx: scripts/export_torch.py and its test
  python3-torchvision  # tests/data/rrc_distribution_test.py: RandomResizedCrop.get_params
  clang-format)  # scripts/check_format.sh (test house.format)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCOLONNADE_CUDA="${COLONNADE_CUDA:-AUTO}" \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "setup.sh: built into $BUILD_DIR/ (trainer, make_shards, tests)"
