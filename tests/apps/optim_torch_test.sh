#!/usr/bin/env bash
# tests/apps/optim_torch_test.py (Nesterov, label smoothing, EMA against PyTorch; LARS
# against the paper) with Debian's python3-torch; skipped (77) without it, a failure under
# COLONNADE_NO_SKIP=1 (tests/skip_policy.sh).   optim_torch_test.sh TOOL [PYTHON]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOL=${1:?usage: optim_torch_test.sh TOOL [PYTHON]}
PY=${2:-/usr/bin/python3}
# shellcheck disable=SC1091  # tests/skip_policy.sh: skip_or_fail
. "$HERE/../skip_policy.sh"
"$PY" -c 'import torch, numpy' 2>/dev/null || skip_or_fail "no torch/numpy for $PY (python3-torch)"
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
exec "$PY" "$HERE/optim_torch_test.py" "$TOOL"
