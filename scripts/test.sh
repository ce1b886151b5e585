#!/usr/bin/env bash
# Builds Colonnade (installing packages first when run as root on a fresh machine) and
# runs every test with ctest. GPU tests skip with a message where no GPU is present;
# tests that need ../shared/data skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${TEST_JOBS:-2}" "$@"
