#!/usr/bin/env bash
# The collective watchdog (src/parallel/watchdog.h) on one host: three ranks of
# watchdog_probe under mpirun, one of them made faulty; the job must end with exit 5 within
# the timeout + 15 s, every surviving rank naming the faulty rank and its host.
#   watchdog_test.sh CASE PROBE          CASE: ok | stall | stop | stop_monitor | mismatch
# WATCHDOG_TIMEOUT (default 4 s) is the probe's --collective_timeout; 0 turns the watchdog
# off, which must make every faulty case fail (by this script's own time limit).
set -uo pipefail
case_name=$1; probe=$2
T=${WATCHDOG_TIMEOUT:-4}
MPIRUN=(mpirun --oversubscribe -np 3)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
fail() { echo "FAIL: $*" >&2; exit 1; }
host=$(hostname)

# run ITERATIONS MODE [RANK]: the probe under mpirun, bounded by T + 15 s (+ start-up).
run() {
  local iterations=$1; shift
  local limit=$((${T%.*} * (1 + iterations / 4) + 25))
  start=$(date +%s.%N)
  out=$(timeout -k 5 "$limit" "${MPIRUN[@]}" "$probe" "$T" "$iterations" "$@" 2>&1); code=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$out" | grep -E "error|done" | cut -c1-240
  echo "exit $code after ${took}s"
  if [ "$code" = 124 ] || [ "$code" = 137 ]; then fail "the job did not end within ${limit}s (hang)"; fi
}

# expect_named WHO WHY: exit 5 and every line of the survivors names WHO on this host.
expect_named() {
  local who=$1 why=$2 survivors=$3
  [ "$code" = 5 ] || fail "exit code $code, expected 5"
  local n
  n=$(echo "$out" | grep -cE "^watchdog_probe: error on rank [0-9]+ \(host $host\): $who on host $host $why")
  [ "$n" -ge "$survivors" ] || fail "$n of $survivors surviving ranks named $who ($why)"
}

case $case_name in
ok)
  # Steps that wait up to T/2 for a slow rank: no false alarm, and the wrappers saw calls.
  run 6 ok
  [ "$code" = 0 ] || fail "exit code $code for a healthy run"
  [ "$(echo "$out" | grep -c "^probe: rank . done")" = 3 ] || fail "not every rank finished"
  echo "$out" | grep -q "error" && fail "an error in a healthy run"
  echo "$out" | grep -q "(0 blocking calls watched)" && fail "the wrappers saw no call"
  ;;
stall)
  # Rank 2 busy outside MPI (its heartbeats go on): named as not joining.
  run 40 stall 2
  expect_named "rank 2" "did not join the others' collective: outside MPI at step 3" 2
  ;;
stop)
  # Rank 2 stopped (SIGSTOP): silent, named by the monitor.
  run 40 stop 2
  expect_named "rank 2" "stopped answering: no heartbeat for" 2
  ;;
stop_monitor)
  # The monitor itself (rank 0) stopped: the others name it.
  run 40 stop 0
  expect_named "rank 0" "\(the watchdog's monitor\) stopped answering" 2
  ;;
mismatch)
  # Rank 1 waits in another collective than the others: every rank waits; rank 1 is named.
  run 40 exit 1
  expect_named "rank 1" "waits in MPI_Bcast while every rank waits in a collective" 2
  ;;
*) fail "unknown case $case_name" ;;
esac
took_i=${took%.*}
[ "$took_i" -le $((${T%.*} + 15)) ] || fail "ended after ${took}s, more than the timeout + 15 s"
echo "ok: $case_name"
