# Sourced by the shell tests: skip_or_fail REASON ends the test as a ctest skip (exit 77)
# where an optional resource is missing (no ../shared/data, no h5py, no Slurm packages on
# a developer's machine), and as a failure where COLONNADE_NO_SKIP=1: .ci/run sets it,
# because CI installs every package and has ../shared/data, so a skip there would hide a
# broken install or a broken test.
skip_or_fail() {
  if [ "${COLONNADE_NO_SKIP:-0}" = 1 ] || [ "${COLONNADE_REQUIRE_SLURM:-0}" = 1 ]; then
    echo "FAIL (COLONNADE_NO_SKIP=1, nothing may be skipped): $*" >&2
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
