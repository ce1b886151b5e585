#!/usr/bin/env bash
# What a trainer process costs before it trains: a CPU run and `--version` load no cuBLAS
# (src/cuda/cublas_loader.cc opens it on the first cuBLAS call: 0.4 s of CPU a process
# otherwise) and, started without a launcher, start no orted beside them (src/parallel/
# mesh.cc's InitMpi: an isolated Open MPI singleton). glibc's loader names every program it
# starts and every library it opens under LD_DEBUG=files.
#   startup_cost.sh TRAINER
set -uo pipefail
TRAINER=${1:?usage: startup_cost.sh TRAINER}
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
unset OMPI_MCA_ess_singleton_isolated

check() {  # WHAT ARGS...: runs the trainer, then looks at what its loader reported
  local what=$1 out; shift
  out=$(LD_DEBUG=files "$TRAINER" "$@" 2>&1) || { echo "$out" | grep -v '^ *[0-9]*:' | tail -5
                                                   fail "$what: the trainer failed"; }
  grep -q "initialize program: " <<<"$out" ||
    fail "$what: no LD_DEBUG=files output (not glibc's loader?)"
  ! grep -E "file=[^ ]*libcublas" <<<"$out" | head -2 | grep . ||
    fail "$what loaded cuBLAS at start (see the lines above)"
  ! grep -E "initialize program: [^ ]*orted" <<<"$out" | grep . ||
    fail "$what started an orted beside itself (see the line above)"
  echo "ok: $what: no cuBLAS, no orted"
}
check "trainer --version" --version
check "a CPU training step" --model=cifar10-80sec --data=synthetic --device=cpu --steps=1 \
  --batch_size=8 --synthetic_size=64
