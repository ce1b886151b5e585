#!/usr/bin/env bash
# A throw-away one-node Slurm cluster on localhost, for the Slurm tests and for trying the
# batch scripts in scripts/slurm/ without a real cluster. Everything (slurm.conf, munge
# key and socket, state, spool, logs) lives in one directory; nothing under /etc is used.
#
#   tests/slurm/minicluster.sh install      # as root: apt-get install slurm-wlm munge
#   tests/slurm/minicluster.sh start DIR    # write DIR/slurm.conf, start the daemons,
#                                           # wait until the node is idle
#   export SLURM_CONF=DIR/slurm.conf        # then sbatch / squeue / scontrol as usual
#   tests/slurm/minicluster.sh stop DIR     # cancel jobs, stop the daemons, keep DIR
#
# Exit codes: 0 ok; 1 usage or other error; 3 the packages cannot be installed; 4 a
# daemon did not start (its log is printed). The tests map 3 and 4 to a skip.
#
# The node claims CPUS (default 4) CPUs whatever the machine has (SlurmdParameters=
# config_overrides), so two-rank jobs fit on a two-core CI machine. Ports are chosen free
# at start; two clusters can run side by side in different directories.
set -uo pipefail

PACKAGES=(slurm-wlm munge)

die() { echo "minicluster: $*" >&2; exit 1; }

have_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v sbatch >/dev/null && command -v munged >/dev/null
}

cmd_install() {
  if have_packages; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "minicluster: slurm-wlm and munge are not installed and we are not root" >&2
    return 3
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Debian's postinst scripts would start the system-wide daemons (with /etc/slurm and
  # /etc/munge); a policy-rc.d that denies it keeps the machine as it was, when none exists.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
  fi
  local rc=0
  echo "minicluster: installing ${PACKAGES[*]} (apt-get)"
  if ! apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null || rc=3
  fi
  [ "$own_policy" = 1 ] && rm -f "$policy"
  if [ $rc -ne 0 ] || ! have_packages; then
    echo "minicluster: cannot install ${PACKAGES[*]}" >&2
    return 3
  fi
}

# A TCP port on 127.0.0.1 that nothing listens on (bash's /dev/tcp connects or fails).
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    if ! (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

# Prints a daemon's log tail and returns 4 (the caller stops what was started).
start_failed() {
  local what=$1 log=$2
  echo "minicluster: $what did not start; last lines of $log:" >&2
  tail -n 30 "$log" >&2 2>/dev/null
  return 4
}

cmd_start() {
  local dir=${1:?start needs a directory}
  have_packages || { echo "minicluster: slurm-wlm/munge are not installed (run install)" >&2; return 3; }
  mkdir -p "$dir" || die "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  chmod 700 "$dir"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  # A unix socket path is limited to 107 bytes.
  [ ${#dir} -lt 80 ] || die "directory path too long for the munge socket: $dir"
  local conf=$dir/slurm.conf sock=$dir/munge/munge.socket
  local ctld_port slurmd_port
  ctld_port=$(free_port) || die "no free TCP port"
  slurmd_port=$(free_port) || die "no free TCP port"
  [ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$((ctld_port + 1))

  # ---- munge: own key, own socket ---------------------------------------------------
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  # In the foreground (in our background), like the Slurm daemons below: the pid we record
  # is the daemon's.
  setsid munged --foreground --force --socket="$sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" >>"$dir/log/munged.out" 2>&1 </dev/null &
  echo $! >"$dir/munged.daemon.pid"
  local ok=0
  for _ in $(seq 1 50); do
    if munge -n --socket="$sock" 2>/dev/null | unmunge --socket="$sock" >/dev/null 2>&1; then
      ok=1; break
    fi
    sleep 0.1
  done
  if [ $ok != 1 ]; then
    cat "$dir/log/munged.out" >>"$dir/log/munged.log" 2>/dev/null
    start_failed "munged (credential round trip)" "$dir/log/munged.log"
    return 4
  fi

  # ---- slurm.conf --------------------------------------------------------------------
  cat >"$conf" <<EOF
# One-node test cluster written by tests/slurm/minicluster.sh
ClusterName=colonnade-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also the time a requeued job waits before it may start again (Slurm's
# default: 120 s); 10 s keeps the tests short.
AuthInfo=socket=$sock,cred_expire=${CRED_EXPIRE:-10}
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# Look at pending (e.g. just requeued) jobs every 2 s instead of every 30-60 s.
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=none
SwitchType=switch/none
JobRequeue=1
PreemptType=preempt/none
ReturnToService=2
KillWait=30
MinJobAge=3600
InactiveLimit=0
PropagateResourceLimits=NONE
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs=${CPUS:-4} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

  # ---- daemons (foreground, in the background of this shell; pids recorded) ----------
  export SLURM_CONF=$conf
  setsid slurmctld -D -i -f "$conf" >>"$dir/log/slurmctld.out" 2>&1 </dev/null &
  echo $! >"$dir/slurmctld.daemon.pid"
  setsid slurmd -D -N localhost -f "$conf" >>"$dir/log/slurmd.out" 2>&1 </dev/null &
  echo $! >"$dir/slurmd.daemon.pid"

  local state=""
  for _ in $(seq 1 120); do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    for d in slurmctld slurmd; do
      if ! kill -0 "$(cat "$dir/$d.daemon.pid")" 2>/dev/null; then
        cat "$dir/log/$d.out" >>"$dir/log/$d.log" 2>/dev/null
        start_failed "$d (exited)" "$dir/log/$d.log"
        return 4
      fi
    done
    sleep 0.5
  done
  if [ "$state" != idle ]; then
    echo "minicluster: node state is '${state:-unknown}' after 60 s, not idle" >&2
    start_failed slurmctld "$dir/log/slurmctld.log"
    start_failed slurmd "$dir/log/slurmd.log"
    return 4
  fi
  echo "minicluster: up in $dir (slurmctld :$ctld_port, slurmd :$slurmd_port); export SLURM_CONF=$conf"
}

# Pids of processes whose environment names this cluster's slurm.conf: the daemons'
# descendants (slurmstepd, job scripts, tasks), which outlive slurmd.
cluster_pids() {
  local conf=$1 p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then
      echo "${p#/proc/}"
    fi
  done
}

cmd_stop() {
  local dir=${1:?stop needs a directory}
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  local conf=$dir/slurm.conf
  export SLURM_CONF=$conf
  # Cancel every job of this cluster, give them a moment to end.
  if [ -f "$dir/slurmctld.daemon.pid" ] && kill -0 "$(cat "$dir/slurmctld.daemon.pid")" 2>/dev/null; then
    scancel --full --quiet --partition=debug 2>/dev/null
    for _ in $(seq 1 40); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.25
    done
  fi
  local f pid
  for f in slurmd.daemon.pid slurmctld.daemon.pid munged.daemon.pid; do
    [ -f "$dir/$f" ] || continue
    pid=$(cat "$dir/$f")
    kill -TERM "$pid" 2>/dev/null
  done
  for f in slurmd.daemon.pid slurmctld.daemon.pid munged.daemon.pid; do
    [ -f "$dir/$f" ] || continue
    pid=$(cat "$dir/$f")
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null
  done
  # Whatever the daemons started and left behind.
  for pid in $(cluster_pids "$conf"); do kill -KILL "$pid" 2>/dev/null; done
  return 0
}

case ${1:-} in
install) cmd_install ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
*) echo "usage: $0 install | start DIR | stop DIR" >&2; exit 1 ;;
esac
