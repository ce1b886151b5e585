#!/usr/bin/env bash
# The main job on an embedded default: trains cuda-convnet's "80sec" CIFAR-10 network on
# the generated (learnable) synthetic image dataset on the CPU, printing progress, and
# reports the error on the generator's held-out images. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/trainer" --model=cifar10-80sec --device=cpu --data=synthetic \
  --val_data=synthetic --synthetic_size=8192 --batch_size=64 --epochs=1 \
  --log_every=20 "$@"
