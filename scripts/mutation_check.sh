#!/usr/bin/env bash
# Proves that the test suite bites: breaks, one at a time, a few representative places of
# the code (a convolution's backward index on the CPU and in a CUDA kernel run by the
# emulator, the momentum sign on both backends, the resume cursor, the gradient-bucket
# order, the sampler's rank slice) and runs the tests that guard each. Every mutation must
# turn its tests red; the unmutated tree must pass the same tests first.
#
#   scripts/mutation_check.sh [WORKDIR [NAME_REGEX]]   (default /tmp/colonnade-mutation; all)
#
# The working tree (with uncommitted changes) is copied to WORKDIR/src and built there
# (CPU backend and the CUDA emulator; WORKDIR/build is kept for incremental runs), so the
# checkout is never modified. Prints a table; exits 1 if any mutation survived, 2 if a
# mutation site is no longer in the code (update the MUTATIONS table below).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-/tmp/colonnade-mutation}
SRC=$WORK/src BUILD=$WORK/build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$WORK"
# A fresh copy each run (tar keeps modification times, so the kept build stays incremental);
# tar rather than rsync, which a minimal Debian lacks.
rm -rf "$SRC"
mkdir -p "$SRC"
if ! tar -C "$ROOT" --exclude='./build*' --exclude=./.git --exclude=./.deps --exclude=./.gpu_data \
     -cf - . | tar -C "$SRC" -xf -; then
  echo "copying the tree to $SRC failed" >&2
  exit 2
fi

# name | file | exact text (must occur once) | replacement | build targets | ctest regex
MUTATIONS=(
  "conv backward index (CPU col2im, kernel tap flipped)|src/core/cpu_ops.cc|float* d = dxrow + (ox * g.stride - g.pad + kx) * N;|float* d = dxrow + (ox * g.stride - g.pad + (g.KW - 1 - kx)) * N;|core_tests|^core\\.Shapes/ConvTest\\."
  "conv backward index (CUDA kernels on the emulator, tap not flipped)|src/cuda/conv/common.h|const int kx = p.kx0 + p.step * (p.tkw - 1 - r % p.tkw);|const int kx = p.kx0 + p.step * (r % p.tkw);|cuda_emu_tests|^cuda_emu\\.Shapes/ConvTest\\.|^cuda_emu\\.ConvOverrideTest\\."
  "momentum sign (CPU SGD)|src/core/ops/sgd.cc|const float vi = p.momentum * v[i] - p.lr|const float vi = -p.momentum * v[i] - p.lr|core_tests|^core\\.(CpuOpsSgd|Optimizer)\\."
  "momentum sign (CUDA SGD kernel on the emulator)|src/cuda/ops/sgd.cu|__fsub_rn(__fmul_rn(p.momentum, p.v[i])|__fsub_rn(__fmul_rn(-p.momentum, p.v[i])|cuda_emu_tests|^cuda_emu\\.CudaTest\\.SgdUpdate$"
  "resume cursor (data position dropped)|src/apps/train_setup.cc|start_cursor.position = c.state.cursor_position;|start_cursor.position = 0;|trainer checkpoint_diff train_loop_test|^trainer\\.checkpoint\\.resume_bitwise$|^apps\\.TrainLoopTest\\."
  "gradient bucket order (bucket launched one layer early)|src/parallel/gradient_sync.cc|current.ready_layer = i;|current.ready_layer = i + 1;|parallel_mpi_tests parallel_equivalence_test|^parallel_mpi_np[2-4]$|^parallel_equivalence_np2$"
  "sampler rank slice (neighbouring ranks overlap by one image)|src/data/sampler.cc|*begin = count * rank / size;|*begin = rank > 0 ? count * rank / size - 1 : 0;|data_tests parallel_equivalence_test trainer|^data\\.Sampler|^parallel_equivalence_np2$|^trainer\\.checkpoint\\.resume_bitwise_mpi$"
  # The input-safety code (issue 31): limits, links, output files, the environment.
  "image limit (width not checked against the side limit)|src/data/limits.cc|width > limits.max_side) {|false) {|data_tests|^data\\.LimitsTest\\."
  "HDF5 links (soft and external links followed)|src/hdf5/hdf5.cc|if (info.type == H5L_TYPE_HARD) return \"\";|return \"\";|data_tests checkpoint_tests hdf5_tests|^data\\.|^checkpoint_tests$|^hdf5\\."
  "HDF5 storage (external raw data files read)|src/hdf5/hdf5.cc|if (H5Pget_external_count(dcpl.get()) != 0) {|if (false) {|data_tests checkpoint_tests hdf5_tests|^data\\.|^checkpoint_tests$|^hdf5\\."
  "output file (a symbolic link replaced)|src/apps/output_file.cc|  if (S_ISLNK(st.st_mode)) {|  if (false) {|trainer make_shards checkpoint_diff|^trainer\\.checkpoint\\.predictions_no_clobber$"
  "rank log (appended through a symbolic link)|src/apps/train_loop.cc|\"--rank_log_dir\", AppendFile::kNoLinks);|\"--rank_log_dir\", AppendFile::kFollowLinks);|trainer|^trainer\\.checkpoint\\.rank_log_dir_refused$"
  "checkpoint lock (a hard link to another file taken as the lock)|src/checkpoint/directory.cc|} else if (st.st_nlink != 1) {|} else if (false) {|checkpoint_tests trainer|^checkpoint_tests$|^trainer\\.checkpoint_safety\\.lock_file$"
  "checkpoint lock (a file of other contents taken as the lock)|src/checkpoint/directory.cc|  if (text.empty()) return true;|  return true;|checkpoint_tests trainer|^checkpoint_tests$|^trainer\\.checkpoint_safety\\.lock_file$"
  "checkpoint attributes (every value taken as in range)|src/checkpoint/read.cc|if (v >= r.lo && v <= r.hi) return \"\";|return \"\";|checkpoint_tests trainer checkpoint_diff|^checkpoint_tests$|^trainer\\.checkpoint_safety\\.bad_attributes$"
  "checkpoint cursor (a cursor beyond the data accepted)|src/checkpoint/read.cc|if (want.dataset_size >= 0 && s.cursor_position > want.dataset_size) {|if (false) {|checkpoint_tests trainer|^checkpoint_tests$|^trainer\\.checkpoint_safety\\.corrupt_cursor$"
  "environment (stray characters skipped in a number)|src/core/env.cc|if (!IsDigit(text[i])) return false;|if (!IsDigit(text[i])) continue;|core_tests data_tests|^core\\.EnvTest\\.|^data\\.LimitsTest\\."
)
# scripts/mutation_check.sh WORKDIR NAME_REGEX runs only the mutations whose name matches.
ONLY=${2:-}

cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLONNADE_CUDA=OFF \
  -DCOLONNADE_CUDA_EMULATION=ON -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" \
  > "$WORK/configure.log" 2>&1 || { tail -20 "$WORK/configure.log"; exit 2; }

field() { local IFS='|'; read -r -a f <<< "$1"; echo "${f[$2]}"; }
# The ctest regex is the rest of the line after field 5 (it may contain '|').
regex_of() { echo "$1" | cut -d'|' -f6-; }

# replace FILE OLD NEW: exactly one occurrence, or exit 2.
replace() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1:4]
s = open(path).read()
n = s.count(old)
if n != 1:
    sys.exit(f"mutation site found {n} times in {path} (expected once): {old!r}")
open(path, "w").write(s.replace(old, new))
PY
}

build() { cmake --build "$BUILD" -j "$(nproc)" --target $1 > "$WORK/build.log" 2>&1; }
run_tests() {
  ctest --test-dir "$BUILD" -R "$1" -j "$(nproc)" --timeout 900 > "$WORK/ctest.log" 2>&1
  local rc=$?
  ntests=$(grep -oE '[0-9]+ tests failed out of [0-9]+|100% tests passed, 0 tests failed out of [0-9]+' "$WORK/ctest.log" | tail -n 1)
  return $rc
}

status=0
printf '%-70s %-9s %s\n' "mutation" "result" "tests"
for m in "${MUTATIONS[@]}"; do
  name=$(field "$m" 0) file=$(field "$m" 1) old=$(field "$m" 2) new=$(field "$m" 3)
  [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]] && continue
  targets=$(field "$m" 4) regex=$(regex_of "$m")
  # The unmutated tree passes the same tests (otherwise a red run proves nothing).
  if ! build "$targets"; then echo "baseline build failed (see $WORK/build.log)"; exit 2; fi
  if ! run_tests "$regex"; then
    printf '%-70s %-9s %s\n' "$name" "BASELINE" "fails unmutated: $ntests"; status=1; continue
  fi
  cp "$SRC/$file" "$WORK/saved"
  replace "$SRC/$file" "$old" "$new" || exit 2
  if ! build "$targets"; then
    result="killed" ntests="(does not compile)"
  elif run_tests "$regex"; then
    result="SURVIVED"; status=1
  else
    result="killed"
  fi
  cp "$WORK/saved" "$SRC/$file"
  printf '%-70s %-9s %s\n' "$name" "$result" "$ntests ($regex)"
done
build "$(for m in "${MUTATIONS[@]}"; do field "$m" 4; done | tr '\n' ' ')" >/dev/null 2>&1
exit $status
