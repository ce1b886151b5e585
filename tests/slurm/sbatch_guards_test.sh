#!/usr/bin/env bash
# scripts/slurm/*.sbatch refuse what would break a requeue, before starting anything
# (no Slurm needed: SLURM_JOB_ID is faked, and no srun is ever reached), and train.sbatch's
# optional staging (STAGE_FROM/STAGE_TO) with a stand-in srun that runs its command once.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$ROOT/scripts/slurm/train.sbatch
S=$ROOT/scripts/slurm/sweep_lr.sbatch
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
# expect CODE REGEX -- command...: exit code and a line of the output.
expect() {
  local want=$1 regex=$2; shift 3
  local out got
  out=$("$@" 2>&1); got=$?
  if [ "$got" != "$want" ] || ! grep -Eq -- "$regex" <<<"$out"; then
    echo "FAIL: $* -> exit $got (want $want), output:"; echo "$out"; fails=$((fails + 1))
  else
    echo "ok: exit $got /$regex/: ${*:2}"
  fi
}
fake=(env -u SLURM_ARRAY_TASK_ID SLURM_JOB_ID=1 SLURM_SUBMIT_DIR="$work" TRAINER=/bin/true)
expect 2 "not inside a Slurm job" -- env -u SLURM_JOB_ID bash "$T" --steps=1
expect 2 "set CHECKPOINT_DIR instead" -- "${fake[@]}" bash "$T" --checkpoint_dir=/x
expect 2 "always runs --resume=auto" -- "${fake[@]}" bash "$T" --resume=none
expect 2 "always runs --resume=auto" -- "${fake[@]}" bash "$T" --resume /x/ckpt-000000001.h5
expect 2 "TRAINER=/nonexistent is not an executable" -- \
  env SLURM_JOB_ID=1 SLURM_SUBMIT_DIR="$work" TRAINER=/nonexistent bash "$T"
expect 2 "no trainer binary" -- env -u TRAINER SLURM_JOB_ID=1 SLURM_SUBMIT_DIR="$work" \
  PATH=/usr/bin:/bin bash "$T"
expect 2 "LAUNCHER must be srun or mpirun" -- "${fake[@]}" LAUNCHER=pdsh bash "$T"
expect 2 "not a job array task" -- env -u SLURM_ARRAY_TASK_ID bash "$S"
expect 2 "array index 4 but LRS has only 2 rates" -- \
  env SLURM_ARRAY_TASK_ID=4 LRS="0.1 0.2" SLURM_SUBMIT_DIR="$work" bash "$S"

# ---- STAGE_FROM/STAGE_TO: the guards, then a copy through a stand-in srun (one "node") ----
expect 2 "STAGE_FROM and STAGE_TO go together" -- "${fake[@]}" STAGE_FROM="$work" bash "$T"
expect 2 "STAGE_FROM and STAGE_TO go together" -- "${fake[@]}" STAGE_TO=/local/x bash "$T"
expect 2 "STAGE_FROM=$work/nope is not a directory" -- \
  "${fake[@]}" STAGE_FROM="$work/nope" STAGE_TO=/local/x bash "$T"
expect 2 "STAGE_TO=local/x must be an absolute path" -- \
  "${fake[@]}" STAGE_FROM="$work" STAGE_TO=local/x bash "$T"
mkdir -p "$work/bin" "$work/src/train"
cat >"$work/bin/srun" <<'EOF'
#!/usr/bin/env bash
# srun stand-in: drops srun's options and runs the command once, as on a one-node job.
while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
exec "$@"
EOF
chmod +x "$work/bin/srun"
echo shard >"$work/src/train/shard-00000.h5"
staged=(env PATH="$work/bin:$PATH" "${fake[@]}" STAGE_FROM="$work/src" STAGE_TO="$work/local/data")
expect 0 "staged in [0-9]+ s" -- "${staged[@]}" bash "$T" --data="$work/local/data/train"
if [ "$(cat "$work/local/data/train/shard-00000.h5" 2>/dev/null)" != shard ]; then
  echo "FAIL: STAGE_FROM was not copied to STAGE_TO"; fails=$((fails + 1))
fi
expect 0 "warning: STAGE_TO=$work/local/data is not named by any trainer flag" -- \
  "${staged[@]}" bash "$T" --data="$work/src/train"
: >"$work/file"
expect 1 "staging $work/src -> $work/file/data failed" -- \
  env PATH="$work/bin:$PATH" "${fake[@]}" STAGE_FROM="$work/src" STAGE_TO="$work/file/data" \
  bash "$T" --data="$work/file/data/train"
[ $fails = 0 ] || { echo "$fails check(s) failed"; exit 1; }
