#!/usr/bin/env bash
# Reproduces experiments/metrics_plot: cifar10-80sec on real CIFAR-10, two ranks, trained
# as a Slurm job through scripts/slurm/train.sbatch on a one-node test cluster
# (tests/slurm/minicluster.sh), preempted once mid-run with the time-limit warning signal
# (USR1), requeued and resumed; then scripts/plot_metrics.py draws the metrics file.
#
#   experiments/metrics_plot/run.sh [WORKDIR]     (as root; Debian 12; ~10 min on 2 cores)
#
# Environment: TRAINER [build/trainer], MAKE_SHARDS [build/make_shards], EPOCHS [2],
# PREEMPT_AT [400] (the step after which the job is signalled; 0: never), COMMIT [HEAD].
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${1:-/tmp/colonnade-metrics-plot}
EPOCHS=${EPOCHS:-2}
PREEMPT_AT=${PREEMPT_AT:-400}
export TRAINER=${TRAINER:-$ROOT/build/trainer}
export MAKE_SHARDS=${MAKE_SHARDS:-$ROOT/build/make_shards}
die() { echo "run.sh: $*" >&2; exit 1; }

mkdir -p "$WORK" || die "cannot create $WORK"
"$ROOT/scripts/prepare_cifar10.sh" "$WORK/cifar10" || die "prepare_cifar10.sh failed"
"$ROOT/tests/slurm/minicluster.sh" install || die "cannot install Slurm"
"$ROOT/tests/slurm/minicluster.sh" start "$WORK/cluster" || die "cannot start the cluster"
trap '"$ROOT/tests/slurm/minicluster.sh" stop "$WORK/cluster"' EXIT
export SLURM_CONF=$WORK/cluster/slurm.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export COLONNADE_CPU_THREADS=1

mkdir -p "$WORK/submit" && cd "$WORK/submit" || exit 1
rm -rf checkpoints/cifar80
job=$(sbatch --parsable -J cifar80 --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --time=60 \
  "$ROOT/scripts/slurm/train.sbatch" --model=cifar10-80sec --data="$WORK/cifar10/train" \
  --val_data="$WORK/cifar10/test" --epochs="$EPOCHS" --eval_every=100 --log_every=20 \
  --mirror) || die "sbatch failed"
log=$WORK/submit/cifar80-$job.out
echo "job $job, log $log"

state() { scontrol show job -o "$job" | tr ' ' '\n' | sed -n 's/^JobState=//p'; }
if [ "$PREEMPT_AT" -gt 0 ]; then
  until grep -qE "^step +$PREEMPT_AT/" "$log" 2>/dev/null; do
    [ "$(state)" = RUNNING ] || [ "$(state)" = PENDING ] || die "job ended early: $(state)"
    sleep 2
  done
  scancel --signal=USR1 --batch "$job" && echo "preempted after step $PREEMPT_AT (USR1)"
fi
while :; do
  case $(state) in COMPLETED) break ;; PENDING | RUNNING | COMPLETING | CONFIGURING) sleep 5 ;;
    *) cat "$log"; die "job ended $(state)" ;; esac
done
echo "job $job completed"

cp "$WORK/submit/checkpoints/cifar80/metrics.jsonl" "$HERE/metrics.jsonl"
# Every record names the checkout's commit (COMMIT overrides); rebuild the trainer first,
# or the records name a tree the binary was not built from.
/usr/bin/python3 "$ROOT/scripts/record_commit.py" "$(/usr/bin/python3 "$ROOT/scripts/record_commit.py" --which)" \
  "$HERE/metrics.jsonl" > /dev/null
cp "$log" "$HERE/job.log"
/usr/bin/python3 "$ROOT/scripts/plot_metrics.py" "$HERE/metrics.jsonl" "$HERE/cifar10-80sec.png" \
  --title "cifar10-80sec on CIFAR-10, 2 ranks (CPU), Slurm job preempted after step $PREEMPT_AT and requeued"
