#!/usr/bin/env bash
# Preemption and requeue on a real Slurm: a one-node cluster on localhost
# (tests/slurm/minicluster.sh) runs scripts/slurm/train.sbatch, the job is interrupted
# mid-run, checkpoints, is requeued, resumes, and must end bitwise where an uninterrupted
# job ends (the CPU backend is deterministic).
#
#   preempt_requeue_test.sh TRAINER CHECKPOINT_DIFF [CASE...]
#
# Cases (default: all, sharing one cluster and one reference job):
#   usr1_srun     the time-limit warning: `scancel --signal=USR1 --batch` signals only the
#                 batch shell (as --signal=B:USR1@T does); the script forwards it to the
#                 ranks through srun --mpi=pmix, they checkpoint and exit 75, the script
#                 runs `scontrol requeue`.
#   usr1_mpirun   the same through the documented mpirun variant (LAUNCHER=mpirun).
#   requeue_srun  a requeue from outside (`scontrol requeue`, what an operator or
#                 preemption with PreemptMode=REQUEUE does): Slurm sends SIGTERM to every
#                 process of the job, the ranks checkpoint within KillWait and Slurm
#                 requeues the job itself.
#   scancel_resubmit  a plain `scancel`: the ranks still checkpoint, but the job stays
#                 cancelled (the script must not requeue it); submitting it again with the
#                 same name continues from the checkpoint.
#
# COLONNADE_SLURM_CASES="a b" picks cases when none are given; KEEP_WORK=1 keeps the
# temporary directory (job logs, checkpoints, daemon logs) for a look afterwards.
#
# Exit 0 pass, 1 fail, 77 skip: only when slurm-wlm/munge cannot be installed or the
# daemons cannot start (COLONNADE_REQUIRE_SLURM=1 turns those into failures).
set -uo pipefail

TRAINER=$(realpath "${1:?usage: $0 TRAINER CHECKPOINT_DIFF [CASE...]}")
DIFF=$(realpath "${2:?usage: $0 TRAINER CHECKPOINT_DIFF [CASE...]}")
shift 2
CASES=("$@")
if [ ${#CASES[@]} -eq 0 ]; then
  read -r -a CASES <<<"${COLONNADE_SLURM_CASES:-usr1_srun usr1_mpirun requeue_srun scancel_resubmit}"
fi
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SBATCH_SCRIPT=$ROOT/scripts/slurm/train.sbatch
CLUSTER=$HERE/minicluster.sh
t0=$SECONDS
# Give up (and clean up) before ctest's TIMEOUT (900 s) would kill us without the trap.
deadline=$((t0 + ${COLONNADE_SLURM_TEST_DEADLINE:-840}))

say() { printf '[%4ds] %s\n' $((SECONDS - t0)) "$*"; }
# shellcheck source=../skip_policy.sh
. "$HERE/../skip_policy.sh"
skip() { skip_or_fail "$@"; }

for f in "$TRAINER" "$DIFF"; do [ -x "$f" ] || { echo "FAIL: $f is not executable" >&2; exit 1; }; done

"$CLUSTER" install
case $? in 0) ;; 3) skip "slurm-wlm and munge cannot be installed (apt-get as root)" ;;
  *) echo "FAIL: minicluster install" >&2; exit 1 ;; esac

work=$(mktemp -d /tmp/colonnade-slurm.XXXXXX)
cleanup() {
  local rc=$?
  "$CLUSTER" stop "$work/cluster"
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    # Leave a trace for a CI log: the job logs and the daemons' last words.
    for f in "$work"/submit/*.out "$work"/cluster/log/slurmctld.log "$work"/cluster/log/slurmd.log; do
      [ -f "$f" ] || continue
      echo "---- $f (last 40 lines)"; tail -n 40 "$f"
    done
  fi
  if [ "${KEEP_WORK:-0}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
  say "total $((SECONDS - t0)) s, exit $rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$CLUSTER" start "$work/cluster"
case $? in 0) ;; 4) skip "the Slurm daemons did not start (logs above)" ;;
  *) echo "FAIL: minicluster start" >&2; exit 1 ;; esac
export SLURM_CONF=$work/cluster/slurm.conf
say "cluster up"

fail() { echo "FAIL: $*" >&2; exit 1; }

# The job's environment (sbatch passes it on): root-run Open MPI, one thread per rank.
export TRAINER OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 COLONNADE_CPU_THREADS=1
STEPS=150
FLAGS=(--model=cifar10-80sec --data=synthetic --device=cpu "--steps=$STEPS" --batch_size=32
       --log_every=10 --seed=7)
mkdir -p "$work/submit"
cd "$work/submit" || exit 1

have_pmix=0
srun --mpi=list 2>&1 | grep -qw pmix && have_pmix=1
say "srun --mpi=list: $(srun --mpi=list 2>&1 | tr -s '\n\t ' ' ')"

# submit NAME [sbatch options...]: the job id. Two tasks on the one node, no GPUs, the
# script's own defaults for the log (%x-%j.out) and CHECKPOINT_DIR (checkpoints/NAME).
submit() {
  local name=$1; shift
  sbatch --parsable -J "$name" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=15 \
    "$@" "$SBATCH_SCRIPT" "${FLAGS[@]}" | cut -d';' -f1
}
field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# wait_done JOB SECONDS: until the job has completed (or failed); prints the state.
wait_done() {
  local state=""
  for _ in $(seq 1 $((2 * $2))); do
    [ $SECONDS -lt $deadline ] || { echo "${state:-UNKNOWN}(test deadline)"; return 0; }
    state=$(field "$1" JobState)
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
      echo "$state"; return 0 ;; esac
    sleep 0.5
  done
  echo "${state:-UNKNOWN}(timeout)"
}
# wait_log FILE REGEX SECONDS
wait_log() {
  for _ in $(seq 1 $((5 * $3))); do
    [ $SECONDS -lt $deadline ] || return 1
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
final_line() { grep -E "^step +$STEPS/$STEPS " "$1" | tail -n 1 | sed -E 's/ +[0-9.]+ img\/s.*//'; }

# The step-150 training record of a metrics file: loss, top-1 and top-5 error as written.
final_record() {
  grep "\"step\":$STEPS," "$1" | tail -n 1 | sed -E 's/.*("loss":[^,]*,"top1_error":[^,]*,"top5_error":[^,]*).*/\1/'
}

# ---- the reference: the same job, never interrupted ---------------------------------------
ref_launcher=srun
[ $have_pmix = 1 ] || ref_launcher=mpirun
ref=$(LAUNCHER=$ref_launcher submit reference) || fail "sbatch reference"
say "reference job $ref ($ref_launcher)"
state=$(wait_done "$ref" 300)
log=$work/submit/reference-$ref.out
[ "$state" = COMPLETED ] || { cat "$log"; fail "reference job ended $state"; }
grep -q "done: $STEPS steps" "$log" || { cat "$log"; fail "reference job did not finish training"; }
grep -q -- "--cpu_threads=1 .*--resume=auto" "$log" || fail "--cpus-per-task=1 did not become --cpu_threads=1"
ref_ckpt=$work/submit/checkpoints/reference/ckpt-$(printf %09d $STEPS).h5
[ -f "$ref_ckpt" ] || fail "no final checkpoint $ref_ckpt"
[ "$(field "$ref" Restarts)" = 0 ] || fail "the reference job was restarted"
ref_final=$(final_line "$log")
ref_record=$(final_record "$work/submit/checkpoints/reference/metrics.jsonl")
[ -n "$ref_record" ] || fail "no step-$STEPS record in the reference's metrics.jsonl"
say "reference done: $ref_final; $ref_record"

# ---- one preemption case ------------------------------------------------------------------
run_case() {
  local case=$1 launcher how
  case $case in
  usr1_srun) launcher=srun; how=usr1 ;;
  usr1_mpirun) launcher=mpirun; how=usr1 ;;
  requeue_srun) launcher=srun; how=requeue ;;
  scancel_resubmit) launcher=srun; how=scancel ;;
  *) fail "unknown case $case" ;;
  esac
  if [ $launcher = srun ] && [ $have_pmix = 0 ]; then
    say "$case: srun has no pmix plugin here; running it with LAUNCHER=mpirun instead"
    launcher=mpirun
  fi
  local job log ckdir
  job=$(LAUNCHER=$launcher submit "$case") || fail "$case: sbatch"
  log=$work/submit/$case-$job.out
  ckdir=$work/submit/checkpoints/$case
  say "$case: job $job ($launcher)"
  # Interrupt it mid-run, when it has trained 40 of 150 steps.
  wait_log "$log" "^step +40/$STEPS " 240 || { cat "$log"; fail "$case: job never reached step 40"; }
  [ -z "$(ls "$ckdir"/ckpt-*.h5 2>/dev/null)" ] || fail "$case: a checkpoint before the preemption"
  case $how in
  usr1) scancel --signal=USR1 --batch "$job" || fail "$case: scancel --signal=USR1 --batch" ;;
  requeue) scontrol requeue "$job" || fail "$case: scontrol requeue" ;;
  scancel) scancel "$job" || fail "$case: scancel" ;;
  esac
  say "$case: interrupted ($how)"
  local state; state=$(wait_done "$job" 300)
  say "$case: job ended $state, restarts $(field "$job" Restarts)"

  # The first run stopped on the signal, wrote the agreed step and exited 75. (Slurm's
  # SIGTERM reaches the ranks directly and through the script as SIGUSR1: either may
  # arrive first.)
  local stopped
  stopped=$(sed -nE 's/^stopped by SIG(USR1|TERM) after step ([0-9]+);.*/\2/p' "$log" | head -n 1)
  [ -n "$stopped" ] || { cat "$log"; fail "$case: no 'stopped by SIG... after step N' line"; }
  if [ "$stopped" -lt 40 ] || [ "$stopped" -ge $STEPS ]; then fail "$case: stopped at step $stopped"; fi
  grep -q "checkpoint step $stopped -> " "$log" || fail "$case: no checkpoint of step $stopped"
  grep -q "trainer exited with status 75" "$log" || fail "$case: the trainer did not exit 75"

  if [ $how = scancel ]; then
    # A cancelled job stays cancelled (the script must not undo scancel) ...
    [ "$state" = CANCELLED ] || fail "$case: job ended $state after scancel, expected CANCELLED"
    grep -q "not requeueing here" "$log" || fail "$case: no 'not requeueing' message"
    sleep 3
    if [ "$(field "$job" JobState)" != CANCELLED ] || [ "$(field "$job" Restarts)" != 0 ]; then
      fail "$case: the cancelled job came back ($(field "$job" JobState), restarts $(field "$job" Restarts))"
    fi
    # ... and submitting the same job again (same name: same checkpoint directory)
    # continues it.
    job=$(LAUNCHER=$launcher submit "$case") || fail "$case: sbatch again"
    log=$work/submit/$case-$job.out
    say "$case: resubmitted as job $job"
    state=$(wait_done "$job" 300)
    [ "$(grep -c 'Colonnade trainer' "$log")" = 1 ] || fail "$case: expected one run in $log"
  else
    [ "$(field "$job" Restarts)" -ge 1 ] || fail "$case: the job was never requeued"
    grep -qE "run 2 \(restarts: 1\)" "$log" || fail "$case: no second run"
    [ "$(grep -c 'Colonnade trainer' "$log")" = 2 ] || fail "$case: expected exactly two runs"
  fi
  if [ $how = usr1 ]; then
    grep -qE "received SIGUSR1 \(time left: [0-9:]+\): asking the ranks" "$log" || fail "$case: the script did not forward"
    grep -q "requeued job $job" "$log" || fail "$case: the script did not requeue the job"
  fi
  [ "$state" = COMPLETED ] || { cat "$log"; fail "$case: job ended $state"; }
  [ "$(field "$job" ExitCode)" = 0:0 ] || fail "$case: exit code $(field "$job" ExitCode)"
  # The next run resumed from exactly that checkpoint and finished.
  grep -qE "resumed +from $ckdir/ckpt-0*$stopped\.h5 at step $stopped " "$log" ||
    fail "$case: the next run did not resume from step $stopped"
  grep -q "done: $STEPS steps" "$log" || fail "$case: the resumed run did not finish"

  # Same final state as the uninterrupted job: the last progress line, the last metrics
  # record (6 decimals), and every parameter and momentum buffer, bitwise.
  local final; final=$(final_line "$log")
  [ "$final" = "$ref_final" ] || fail "$case: final line '$final' != reference '$ref_final'"
  local rec; rec=$(final_record "$ckdir/metrics.jsonl")
  if [ -z "$rec" ] || [ "$rec" != "$ref_record" ]; then
    fail "$case: final metrics '$rec' != reference '$ref_record'"
  fi
  "$DIFF" "$ref_ckpt" "$ckdir/ckpt-$(printf %09d $STEPS).h5" >"$work/diff.txt" 2>&1 ||
    { cat "$work/diff.txt"; fail "$case: final checkpoint differs from the reference"; }
  say "$case: PASS (stopped after step $stopped, resumed, final state bitwise equal)"
}

for c in "${CASES[@]}"; do run_case "$c"; done
say "all cases passed: ${CASES[*]}"
