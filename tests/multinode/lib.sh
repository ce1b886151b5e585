# Shared by the multi-node tests (multinode_tests.sh) and experiments/multinode/: a cluster
# of namespace hosts (cluster.sh) made for the caller and removed when it exits, the trainer
# launched on it, and the fault cases with their checks. Source it, then call mn_cluster N.
#
# Needs: BUILD (the build directory: trainer, checkpoint_diff). Sets MN_NAME, MN_WORK.
# shellcheck disable=SC2034  # MN_ALEX, MN_CIFAR, FAULT_* are for the scripts that source this
MN_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MN_CLUSTER=$MN_HERE/cluster.sh
# shellcheck source=../skip_policy.sh
. "$MN_HERE/../skip_policy.sh"

mn_fail() { echo "FAIL: $*" >&2; exit 1; }

# The environment every rank gets: one CPU thread each (2 cores for up to 8 ranks), root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# The node count must come from MPI, never from the single-host test knob.
unset COLONNADE_TEST_RANKS_PER_NODE
MN_X=(-x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 -x COLONNADE_CPU_THREADS=1)

# Small models: AlexNet at 67x67 keeps its two columns (so --mp=2 works), as in
# tests/apps/fault_tests.sh; cifar10-80sec is the quick one for the fault cases.
MN_ALEX=(--model=alexnet --data=synthetic --device=cpu --batch_size=8 --input_size=67
         --num_classes=10 --synthetic_size=64 --log_every=1 --lr=0.001 --cpu_threads=1)
MN_CIFAR=(--model=cifar10-80sec --data=synthetic --device=cpu --batch_size=32
          --synthetic_size=512 --log_every=1 --cpu_threads=1)

# mn_cluster N: N namespace hosts for this shell, removed on exit (also after a failure or a
# signal). Skips (77) where namespaces cannot be made, fails there under COLONNADE_NO_SKIP=1.
mn_cluster() {
  local n=$1 out code
  MN_WORK=$(mktemp -d)
  out=$(COLONNADE_MN_OWNER=$$ "$MN_CLUSTER" up "$n" 2>&1); code=$?
  if [ "$code" = 77 ]; then
    rm -rf "$MN_WORK"
    skip_or_fail "cannot create network namespaces here: $out"
  fi
  [ "$code" = 0 ] || { rm -rf "$MN_WORK"; mn_fail "cluster.sh up $n: $out"; }
  MN_NAME=$(echo "$out" | tail -n 1)
  trap 'mn_teardown' EXIT
  trap 'exit 130' INT TERM
}

mn_teardown() {
  [ -n "${MN_NAME:-}" ] && "$MN_CLUSTER" down "$MN_NAME" >/dev/null 2>&1
  [ -n "${MN_WORK:-}" ] && rm -rf "$MN_WORK"
  MN_NAME=
}

mn_host() { "$MN_CLUSTER" hosts "$MN_NAME" | awk -v k="$1" '$1 == k {print $2}'; }

# mn_mpirun SLOTS NP [mpirun/program args...]: mpirun on host 1 with SLOTS ranks per host.
mn_mpirun() {
  local slots=$1 np=$2; shift 2
  "$MN_CLUSTER" mpirun "$MN_NAME" "$slots" -np "$np" "${MN_X[@]}" "$@"
}

# mn_train SLOTS NP LOG [trainer flags...]: the trainer, its output in LOG; returns its code.
mn_train() {
  local slots=$1 np=$2 log=$3; shift 3
  mn_mpirun "$slots" "$np" "$BUILD/trainer" "$@" >"$log" 2>&1
}

last_ckpt() { find "$1" -maxdepth 1 -name "ckpt-*.h5" 2>/dev/null | sort | tail -n 1; }
ckpt_step() { local b; b=$(basename "$1" .h5); echo $((10#${b#ckpt-})); }

# mn_ranks_on K: pids of the trainer ranks on host K.
mn_ranks_on() {
  local pids
  pids=$("$MN_CLUSTER" pids "$MN_NAME" "$1")
  # shellcheck disable=SC2086  # a list of pids
  [ -n "$pids" ] && ps -o pid=,comm= -p $pids | awk '$2 == "trainer" {print $1}'
}

# mn_rank_pid R: the pid of world rank R of the running trainer (from its environment).
mn_rank_pid() {
  local p
  for p in $(pgrep -x trainer); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      grep -q "$MN_NAME" "/proc/$p/environ" 2>/dev/null && { echo "$p"; return 0; }
    fi
  done
  return 1
}

# mn_checkpoints_valid DIR: every checkpoint in DIR reads back (checksums, shapes); prints
# how many, or the first that does not and returns 1.
mn_checkpoints_valid() {
  local dir=$1 f n=0
  for f in "$dir"/ckpt-*.h5; do
    [ -e "$f" ] || continue
    "$BUILD/checkpoint_diff" "$f" "$f" >/dev/null 2>&1 || { echo "invalid: $f"; return 1; }
    n=$((n + 1))
  done
  echo "$n"
}

# mn_partial_writes DIR: the temporary files of checkpoint writes that a killed writer left
# (ckpt-<step>.h5.<host>-<pid>.tmp; docs/CHECKPOINTS.md: never read, removed by the next
# write of the lock holder).
mn_partial_writes() { find "$1" -maxdepth 1 -name 'ckpt-*.tmp' -printf '%f\n' 2>/dev/null; }

# mn_fault KIND HOST T DIR LOG SLOTS NP [trainer flags...]: trains with checkpoints every 3
# steps into DIR, makes the fault KIND on host HOST once a checkpoint exists, and waits for
# mpirun. Sets FAULT_CODE (mpirun's exit), FAULT_TOOK (seconds from the fault to mpirun's
# end), FAULT_LINE (the first line naming the culprit), FAULT_STEP (the step logged last
# before the fault). KIND:
#   stop       SIGSTOP the last rank of HOST
#   stopmon    SIGSTOP world rank 0, the watchdog's monitor (HOST is ignored: host 1)
#   cut        the bridge drops every packet of HOST (links stay up: a silent cut)
#   linkdown   HOST's switch port loses carrier
#   killranks  SIGKILL every rank of HOST (its orted survives)
#   crash      SIGKILL every process of HOST, orted included (the kernel closes its sockets)
#   poweroff   cut HOST, then SIGKILL every process on it (nothing is sent: a dead node)
mn_fault() {
  local kind=$1 host=$2 t=$3 dir=$4 log=$5 slots=$6 np=$7; shift 7
  rm -f "$log"
  mn_mpirun "$slots" "$np" "$BUILD/trainer" "$@" --steps=100000 --checkpoint_every=3 \
    --checkpoint_dir="$dir" --collective_timeout="$t" --checkpoint_lock_wait_s=1 \
    >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 1200); do
    [ -n "$(last_ckpt "$dir")" ] && grep -q "^checkpoint step" "$log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$(last_ckpt "$dir")" ] || { kill $pid 2>/dev/null; wait $pid; tail "$log"; mn_fail "no checkpoint before the fault"; }
  # Mid-step: a random moment within the next step or two.
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  sleep $((RANDOM % 2))
  FAULT_STEP=$(grep -oE '^step +[0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
  local ranks
  ranks=$(mn_ranks_on "$host")
  [ -n "$ranks" ] || mn_fail "no trainer rank on host $host"
  local t0
  t0=$(date +%s.%N)
  case $kind in
  stop) kill -STOP "$(echo "$ranks" | tail -n 1)" ;;
  stopmon) kill -STOP "$(mn_rank_pid 0)" ;;
  cut) "$MN_CLUSTER" link "$MN_NAME" "$host" block ;;
  linkdown) "$MN_CLUSTER" link "$MN_NAME" "$host" down ;;
  killranks) echo "$ranks" | xargs kill -KILL ;;
  crash) "$MN_CLUSTER" kill-host "$MN_NAME" "$host" KILL ;;
  poweroff) "$MN_CLUSTER" link "$MN_NAME" "$host" block; "$MN_CLUSTER" kill-host "$MN_NAME" "$host" KILL ;;
  *) mn_fail "unknown fault $kind" ;;
  esac
  # The bound: the watchdog's timeout + 30 s, then this script gives up (a hang).
  local limit=$((${t%.*} + 30)) waited=0
  while kill -0 $pid 2>/dev/null && [ $waited -lt $((limit * 10 + 100)) ]; do
    sleep 0.1; waited=$((waited + 1))
  done
  if kill -0 $pid 2>/dev/null; then
    FAULT_CODE=hang
    kill -INT $pid 2>/dev/null; sleep 1; kill -INT $pid 2>/dev/null; sleep 2; kill -KILL $pid 2>/dev/null
  fi
  wait $pid; local code=$?
  [ "${FAULT_CODE:-}" = hang ] || FAULT_CODE=$code
  FAULT_TOOK=$(echo "$(date +%s.%N) - $t0" | bc | xargs printf '%.1f')
  # Bring the host back for the next case (its processes are gone or stopped for good).
  "$MN_CLUSTER" link "$MN_NAME" "$host" unblock 2>/dev/null
  "$MN_CLUSTER" link "$MN_NAME" "$host" up 2>/dev/null
  "$MN_CLUSTER" kill-host "$MN_NAME" "$host" KILL
  FAULT_LINE=$(grep -m1 -E "error on rank|noticed that process rank|lost communication with a remote daemon" "$log")
  if [ -z "$FAULT_LINE" ]; then FAULT_LINE="(no message)"; fi
}
