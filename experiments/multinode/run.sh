#!/usr/bin/env bash
# Several hosts for real (issue 32): the experiments behind docs/PARALLELISM.md §8 and
# docs/OPERATIONS.md "When a rank stops answering" / "A lost node", on namespace hosts made
# by tests/multinode/cluster.sh (root, iproute2). Results: JSON lines in
# experiments/multinode/results/, each stamped with the commit measured (record_commit.py).
#
#   experiments/multinode/run.sh PART... [--build=DIR] [--out=DIR]
#     equivalence   the (dp, mp) equivalence suite on 2 and 4 hosts x 2 ranks
#     alexnet       trainer AlexNet-67 --mp=2 on 2 and 4 hosts x 2 ranks against one rank:
#                   per-step losses and final weights within the suite's 1e-5
#     resume        checkpoint + resume across 2 and 4 hosts, bitwise the uninterrupted run
#     faults        ROUNDS (default 3) x 7 faults, each must end the job within
#                   --collective_timeout + 30 s; checkpoints checked after every one
#     restart       a lost host: resume on half the hosts and on the original count
#     links         tc-shaped links: step time, comm-wait, overlap; the cost model beside
#     untuned       one link cut with Open MPI's and Linux's TCP defaults (mpirun hangs)
#     algorithms    Open MPI's all-reduce at 1 Gbit/s: TCP connections, libnbc algorithms
#     all           every part
# shellcheck disable=SC2317,SC2086  # part_* are called as "part_$p"; unquoted values are numbers
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$ROOT/build
OUT=$HERE/results
ROUNDS=${ROUNDS:-3}
T=${FAULT_TIMEOUT:-10}
parts=()
for a in "$@"; do
  case $a in
  --build=*) BUILD=${a#*=} ;;
  --out=*) OUT=${a#*=} ;;
  all) parts+=(equivalence alexnet resume faults restart links untuned algorithms) ;;
  *) parts+=("$a") ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || { sed -n '2,20p' "$0"; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD)}
if [ -n "$(git -C "$ROOT" status --porcelain -- src tests)" ]; then
  echo "run.sh: warning: src/ or tests/ have uncommitted changes; the results name $COMMIT" >&2
fi
# shellcheck source=../../tests/multinode/lib.sh
. "$ROOT/tests/multinode/lib.sh"
EQUIV=$BUILD/tests/parallel/parallel_equivalence_test

# emit FILE JSON: one record (the commit is added at the end by record_commit.py).
emit() { echo "$2" >>"$OUT/$1"; echo "  $2"; }
json_str() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
# The relative difference of per-step losses of two --metrics_file runs (train records).
loss_diff() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r["kind"] == "train"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(a) & set(b))
print(len(common), max(abs(a[s] - b[s]) / abs(b[s]) for s in common) if common else "nan")
PY
}

part_equivalence() {
  for hosts in 2 4; do
    (
      mn_cluster "$hosts"
      echo "== equivalence suite on $hosts hosts x 2 ranks ($MN_NAME)"
      local t0=$SECONDS
      mn_mpirun 2 $((2 * hosts)) "$EQUIV" >"$MN_WORK/log" 2>&1; code=$?
      grep -E "^\[equivalence\]|PASSED|FAILED" "$MN_WORK/log"
      grep -E "^\[equivalence\] .*max rel diff" "$MN_WORK/log" | while read -r line; do
        python3 - "$line" "$hosts" "$code" <<'PY' >>"$OUT/equivalence.jsonl"
import json, re, sys
line, hosts, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = re.match(r"\[equivalence\] (.*) \(dp (\d+), mp (\d+)\) on (.*?), (\S+) +max rel diff: loss (\S+), weights (\S+), step-0 grads (\S+)", line)
net, dp, mp, dev, comm, loss, w, g = m.groups()
print(json.dumps({"part": "equivalence", "hosts": hosts, "ranks_per_host": 2, "net": net,
                  "dp": int(dp), "mp": int(mp), "device": dev, "comm": comm,
                  "loss_rel": float(loss), "weights_rel": float(w), "grads_rel": float(g),
                  "limits": {"loss": 1e-5, "weights": 1e-5, "grads": 1e-4},
                  "suite_passed": code == 0, "transport": "TCP between hosts, vader inside"}))
PY
      done
      echo "   exit $code in $((SECONDS - t0)) s"
    )
  done
}

part_alexnet() {
  local steps=6
  echo "== one-rank AlexNet-67 reference, $steps steps"
  local ref
  ref=$(mktemp -d)
  "$BUILD/trainer" "${MN_ALEX[@]}" --steps=$steps --checkpoint_dir="$ref/c" \
    --metrics_file="$ref/m.jsonl" >"$ref/log" 2>&1 || { tail "$ref/log"; mn_fail "one-rank run"; }
  for hosts in 2 4; do
    (
      mn_cluster "$hosts"
      local np=$((2 * hosts))
      echo "== AlexNet-67 --mp=2 on $hosts hosts x 2 ranks (dp $hosts x mp 2)"
      mn_train 2 $np "$MN_WORK/log" "${MN_ALEX[@]}" --mp=2 --steps=$steps \
        --checkpoint_dir="$MN_WORK/c" --metrics_file="$MN_WORK/m.jsonl"; code=$?
      grep -E "layout|^done" "$MN_WORK/log"
      read -r n worst <<<"$(loss_diff "$MN_WORK/m.jsonl" "$ref/m.jsonl")"
      local last
      last=$(printf 'ckpt-%09d.h5' $steps)
      w=$("$BUILD/checkpoint_diff" --novelocity --rtol=1e-5 "$MN_WORK/c/$last" "$ref/c/$last" | tail -n 1)
      v=$("$BUILD/checkpoint_diff" --rtol=1e-5 "$MN_WORK/c/$last" "$ref/c/$last" | tail -n 1)
      echo "   losses: $n steps, worst relative difference $worst; weights: $w; with momentum: $v"
      emit alexnet.jsonl "{\"part\": \"alexnet_mp2\", \"hosts\": $hosts, \"ranks_per_host\": 2, \"dp\": $hosts, \"mp\": 2, \"steps\": $steps, \"exit\": $code, \"banner\": $(json_str "$(grep -o 'world .* node(s)' "$MN_WORK/log")"), \"loss_steps\": $n, \"loss_rel_max\": $worst, \"weights\": $(json_str "$w"), \"weights_and_momentum\": $(json_str "$v"), \"limit\": 1e-5}"
    )
  done
  rm -rf "$ref"
}

part_resume() {
  local steps=6 at=3
  for hosts in 2 4; do
    (
      mn_cluster "$hosts"
      local np=$((2 * hosts)) last
      last=$(printf 'ckpt-%09d.h5' $steps)
      echo "== resume across $hosts hosts (dp $hosts x mp 2): $steps straight vs $at + resume"
      mn_train 2 $np "$MN_WORK/a.log" "${MN_ALEX[@]}" --mp=2 --steps=$steps --checkpoint_dir="$MN_WORK/a" \
        || mn_fail "straight run"
      mn_train 2 $np "$MN_WORK/b1.log" "${MN_ALEX[@]}" --mp=2 --steps=$at --checkpoint_dir="$MN_WORK/b" \
        || mn_fail "first part"
      mn_train 2 $np "$MN_WORK/b2.log" "${MN_ALEX[@]}" --mp=2 --steps=$steps --checkpoint_dir="$MN_WORK/b" \
        || mn_fail "resumed part"
      grep "resumed" "$MN_WORK/b2.log"
      d=$("$BUILD/checkpoint_diff" "$MN_WORK/a/$last" "$MN_WORK/b/$last" | tail -n 1); code=$?
      echo "   $d"
      emit resume.jsonl "{\"part\": \"resume_bitwise\", \"hosts\": $hosts, \"dp\": $hosts, \"mp\": 2, \"steps\": $steps, \"resumed_at\": $at, \"resumed_line\": $(json_str "$(grep resumed "$MN_WORK/b2.log")"), \"checkpoint_diff\": $(json_str "$d"), \"bitwise\": $([ $code = 0 ] && echo true || echo false)}"
    )
  done
}

# One fault case on 2 hosts x 2 ranks and its checks; appends a record to faults.jsonl.
fault_case() {
  local kind=$1 host=$2 model=$3 round=$4
  local flags=("${MN_CIFAR[@]}") mp=1
  if [ "$model" = alexnet ]; then flags=("${MN_ALEX[@]}" --mp=2); mp=2; fi
  local dir=$MN_WORK/$kind-$host-$round
  mn_fault "$kind" "$host" "$T" "$dir" "$MN_WORK/$kind.log" 2 4 "${flags[@]}"
  local within=false
  [ "$FAULT_CODE" != hang ] && awk -v a="$FAULT_TOOK" -v b="$((T + 30))" 'BEGIN{exit !(a <= b)}' && within=true
  # What the user sees: the first line naming the culprit (ORTE's lost-daemon box: its node line).
  local line=$FAULT_LINE
  if [[ "$line" == *"lost communication"* ]]; then
    line="$line $(grep -m1 "Remote daemon:" "$MN_WORK/$kind.log" | sed 's/^ *//')"
  fi
  local named_lines
  named_lines=$(grep -c "^trainer: error on rank" "$MN_WORK/$kind.log")
  local valid n newest written lost=false resumed=false partial after=""
  if n=$(mn_checkpoints_valid "$dir"); then valid=true; else valid=false; echo "   $n"; n=null; fi
  partial=$(mn_partial_writes "$dir" | tr '\n' ' ' | sed 's/ $//')
  newest=$(last_ckpt "$dir")
  written=$(grep -oE "^checkpoint step [0-9]+" "$MN_WORK/$kind.log" | tail -n 1 | grep -oE '[0-9]+$')
  [ -n "$newest" ] && [ "$(ckpt_step "$newest")" -ge "${written:-0}" ] || lost=true
  # The newest checkpoint resumes on the same hosts (2 more steps).
  if [ -n "$newest" ]; then
    local at
    at=$(ckpt_step "$newest")
    if mn_train 2 4 "$MN_WORK/resume.log" "${flags[@]}" --steps=$((at + 2)) --checkpoint_dir="$dir" \
         --checkpoint_lock_wait_s=1 && grep -q "resumed    from $newest at step $at" "$MN_WORK/resume.log"; then
      resumed=true
    fi
    after=$(mn_partial_writes "$dir" | tr '\n' ' ' | sed 's/ $//')
  fi
  printf '   %-9s host %d %-8s exit %-4s %5ss  ckpts %s valid=%s lost=%s resumed=%s partial=[%s] after=[%s]\n     %s\n' \
    "$kind" "$host" "$model" "$FAULT_CODE" "$FAULT_TOOK" "$n" "$valid" "$lost" "$resumed" "$partial" "$after" "${line:0:200}"
  echo "{\"part\": \"fault\", \"round\": $round, \"kind\": \"$kind\", \"host\": $host, \"hostname\": \"$(mn_host "$host")\", \"model\": \"$model\", \"dp\": $((4 / mp)), \"mp\": $mp, \"collective_timeout_s\": $T, \"after_step\": ${FAULT_STEP:-0}, \"exit\": \"$FAULT_CODE\", \"seconds_to_end\": $FAULT_TOOK, \"within_bound\": $within, \"bound_s\": $((T + 30)), \"lines_naming_culprit\": $named_lines, \"message\": $(json_str "$line"), \"checkpoints\": ${n:-0}, \"checkpoints_valid\": $valid, \"partial_writes_left\": $(json_str "$partial"), \"partial_writes_after_resume\": $(json_str "$after"), \"newest_checkpoint_step\": $( [ -n "$newest" ] && ckpt_step "$newest" || echo null), \"last_written_step\": ${written:-null}, \"checkpoint_lost\": $lost, \"resumed\": $resumed}" >>"$OUT/faults.jsonl"
}

part_faults() {
  (
    mn_cluster 2
    echo "== faults on 2 hosts x 2 ranks ($MN_NAME), --collective_timeout=$T, $ROUNDS round(s)"
    for round in $(seq 1 "$ROUNDS"); do
      local model=cifar10
      [ $((round % 2)) = 0 ] && model=alexnet
      fault_case stop 2 $model "$round"
      fault_case stopmon 1 $model "$round"    # rank 0, the watchdog's monitor
      fault_case cut 2 $model "$round"
      fault_case linkdown 2 $model "$round"
      fault_case poweroff 2 $model "$round"
      fault_case killranks 2 $model "$round"
      fault_case crash 2 $model "$round"
    done
  )
}

# A lost host (fault a: every rank of host 2 killed), then the recovery procedure of
# docs/OPERATIONS.md: resume on the hosts left (half: dp halved, the same global batch) and,
# once the host is back, on the original count.
part_restart() {
  (
    mn_cluster 2
    local N=12 d=$MN_WORK f=("${MN_ALEX[@]}" --mp=2)
    local last
    last=$(printf 'ckpt-%09d.h5' $N)
    echo "== restart after a lost host ($MN_NAME): AlexNet-67, dp 2 x mp 2 on 2 hosts, $N steps"
    # A: the uninterrupted run of the original layout.
    mn_train 2 4 "$d/A.log" "${f[@]}" --steps=$N --checkpoint_dir="$d/A" \
      --metrics_file="$d/A.jsonl" || mn_fail "uninterrupted run"
    # The job that loses host 2 (checkpoints every 3 steps).
    mn_fault killranks 2 "$T" "$d/F" "$d/F.log" 2 4 "${f[@]}"
    echo "   lost host 2 after step $FAULT_STEP: exit $FAULT_CODE after ${FAULT_TOOK}s: $FAULT_LINE"
    local C k
    C=$(last_ckpt "$d/F"); k=$(ckpt_step "$C")
    [ "$k" -lt $N ] || mn_fail "the fault came after step $N"
    echo "   newest checkpoint: step $k"
    # Host 2 stays dead while the job runs on host 1 alone.
    "$MN_CLUSTER" link "$MN_NAME" 2 block
    # Half the hosts: 1 host x 2 ranks = dp 1 x mp 2, the same global batch; straight to N ...
    cp -r "$d/F" "$d/H"; rm -f "$d/H/ckpt.lock"
    MN_HOSTS=1 mn_train 2 2 "$d/H.log" "${f[@]}" --steps=$N --checkpoint_dir="$d/H" \
      --metrics_file="$d/H.jsonl" || { tail "$d/H.log"; mn_fail "resume on half the hosts"; }
    grep -E "layout|resumed" "$d/H.log"
    # ... and the same with one more stop and resume on the way (k + 2): bitwise the same.
    cp -r "$d/F" "$d/H2"; rm -f "$d/H2/ckpt.lock"
    MN_HOSTS=1 mn_train 2 2 "$d/H2a.log" "${f[@]}" --steps=$((k + 2)) --checkpoint_dir="$d/H2" \
      || mn_fail "half, first leg"
    MN_HOSTS=1 mn_train 2 2 "$d/H2b.log" "${f[@]}" --steps=$N --checkpoint_dir="$d/H2" \
      || mn_fail "half, second leg"
    "$MN_CLUSTER" link "$MN_NAME" 2 unblock
    # The host is back: the original count (2 hosts) from the lost job's checkpoint ...
    cp -r "$d/F" "$d/O"; rm -f "$d/O/ckpt.lock"
    mn_train 2 4 "$d/O.log" "${f[@]}" --steps=$N --checkpoint_dir="$d/O" --metrics_file="$d/O.jsonl" \
      || mn_fail "resume on the original count"
    # ... and scaled back up after the half-host leg (from H2's checkpoint at k + 2).
    cp -r "$d/H2" "$d/U"; rm -f "$d/U/$last" "$d/U/ckpt.lock"
    mn_train 2 4 "$d/U.log" "${f[@]}" --steps=$N --checkpoint_dir="$d/U" --resume="$d/U/$(printf 'ckpt-%09d.h5' $((k + 2)))" \
      || mn_fail "scale back up"
    local o_a h_a h_h2 u_a first
    o_a=$("$BUILD/checkpoint_diff" "$d/O/$last" "$d/A/$last" | tail -n 1)
    h_h2=$("$BUILD/checkpoint_diff" "$d/H/$last" "$d/H2/$last" | tail -n 1)
    h_a=$("$BUILD/checkpoint_diff" --rtol=1e-5 "$d/H/$last" "$d/A/$last" | tail -n 1)
    u_a=$("$BUILD/checkpoint_diff" --rtol=1e-5 "$d/U/$last" "$d/A/$last" | tail -n 1)
    read -r nl worst <<<"$(loss_diff "$d/H.jsonl" "$d/A.jsonl")"
    first=$(grep -m1 -oE '^step +[0-9]+' "$d/H.log" | grep -oE '[0-9]+')
    echo "   original count from step $k vs uninterrupted: $o_a"
    echo "   half the hosts, resumed once more vs straight: $h_h2"
    echo "   half the hosts vs uninterrupted (dp 2 -> 1): $h_a; losses of $nl steps within $worst"
    echo "   half, then back to 2 hosts vs uninterrupted: $u_a"
    emit restart.jsonl "{\"part\": \"restart\", \"model\": \"alexnet-67\", \"steps\": $N, \"original\": \"2 hosts x 2 ranks, dp 2 x mp 2\", \"fault\": \"killranks host 2\", \"fault_exit\": \"$FAULT_CODE\", \"fault_seconds\": $FAULT_TOOK, \"checkpoint_step\": $k, \"half\": $(json_str "$(grep -o 'world .* node(s)' "$d/H.log")"), \"half_first_step\": ${first:-null}, \"half_resumed\": $(json_str "$(grep resumed "$d/H.log")"), \"original_count_vs_uninterrupted\": $(json_str "$o_a"), \"half_resumed_again_vs_half_straight\": $(json_str "$h_h2"), \"half_vs_uninterrupted\": $(json_str "$h_a"), \"half_loss_steps\": $nl, \"half_loss_rel_max\": $worst, \"half_then_original_vs_uninterrupted\": $(json_str "$u_a")}"
  )
}

# The cost model's row for 2 nodes x 1 GPU (2x1) at the given link constants: "step AR exposed".
predict_row() {
  local tc=$1 bwd=$2 bucket=$3 gbs=$4 alpha=$5 overlap=$6
  "$BUILD/bench_comm" --predict --model=alexnet --input_size=67 --num_classes=10 \
    --compute_ms="$tc" --per_gpu_batch=8 --bwd_fraction="$bwd" --bucket_mb="$bucket" \
    --gpus_per_node=1 --nodes=2 --ib_gbs="$gbs" --alpha_inter_us="$alpha" --overlap="$overlap" |
    awk '$3 == "2x1" {print $10, $8, $9}'
}

# Links of a cluster's speed: 2 hosts x 1 rank (dp 2 across the link, one core each),
# AlexNet-67 at a global batch of 16 (93 MB of gradients a step), links shaped with tbf on
# both ends. bench_comm gives forward, backward, the all-reduce after backward (sync) and
# with the buckets started during backward (overlap); the trainer gives comm-wait and the
# profile of its steps; the cost model, at the same link constants, is put beside them
# (calibrate.py fits it afterwards).
part_links() {
  (
    mn_cluster 2
    local d=$MN_WORK bench=(--model=alexnet --input_size=67 --num_classes=10)
    mpicc -O2 -o "$d/pingpong" "$HERE/pingpong.c" || mn_fail "mpicc pingpong.c"
    echo "== links ($MN_NAME): one rank alone first (t_c, the optimizer)"
    MN_HOSTS=1 mn_mpirun 1 1 "$BUILD/bench_comm" "${bench[@]}" --batch_size=8 --layouts=1x1 \
      --steps=5 --warmup=1 --cpu_threads=1 --csv="$d/one.csv" >"$d/one.log" 2>&1 || mn_fail "one-rank bench_comm"
    MN_HOSTS=1 mn_mpirun 1 1 "$BUILD/trainer" "${MN_ALEX[@]}" --batch_size=8 --steps=10 \
      --profile_steps=6 --log_every=10 >"$d/one_train.log" 2>&1 || mn_fail "one-rank trainer"
    local one_fwd one_bwd one_opt
    one_fwd=$(awk -F, 'NR == 2 {print $4}' "$d/one.csv"); one_bwd=$(awk -F, 'NR == 2 {print $5}' "$d/one.csv")
    one_opt=$(awk '$1 == "optimizer" {print $2}' "$d/one_train.log")
    echo "   one rank, 8 images: forward $one_fwd ms, backward $one_bwd ms, optimizer $one_opt ms"
    local link alpha gbs lat bw B
    for link in none 10gbit 1gbit; do
      case $link in
      none) "$MN_CLUSTER" link "$MN_NAME" 1 clear; "$MN_CLUSTER" link "$MN_NAME" 2 clear ;;
      *) "$MN_CLUSTER" link "$MN_NAME" 1 shape "$link"; "$MN_CLUSTER" link "$MN_NAME" 2 shape "$link" ;;
      esac
      mn_mpirun 1 2 "$d/pingpong" >"$d/pp-$link.txt" 2>&1 || mn_fail "pingpong"
      lat=$(awk '$1 == 8 {print $2}' "$d/pp-$link.txt"); bw=$(awk '$1 == 16777216 {print $3}' "$d/pp-$link.txt")
      # The nominal constants of the issue; unshaped: the measured ones.
      case $link in
      none) gbs=$(printf "%.4f" "$(echo "$bw / 1000" | bc -l)"); alpha=$lat ;;
      10gbit) gbs=1.25; alpha=20 ;;
      1gbit) gbs=0.125; alpha=100 ;;
      esac
      echo "== link $link: ping-pong $lat us (8 B), $bw MB/s (16 MB); model: $gbs GB/s, $alpha us"
      for B in 1 4 16 64; do
        mn_mpirun 1 2 "$BUILD/bench_comm" "${bench[@]}" --batch_size=16 --layouts=2x1 --bucket_mb="$B" \
          --steps=4 --warmup=1 --cpu_threads=1 --csv="$d/b.csv" >"$d/b.log" 2>&1 || { tail "$d/b.log"; mn_fail "bench_comm"; }
        mn_train 1 2 "$d/t.log" "${MN_ALEX[@]}" --batch_size=16 --bucket_mb="$B" --steps=10 \
          --profile_steps=6 --log_every=10 || { tail "$d/t.log"; mn_fail "trainer"; }
        local fwd bwd sync ovl hidden buckets grad cw wall gsw opt tc bf pred
        IFS=, read -r _ _ _ fwd bwd sync ovl hidden _ _ grad buckets _ <<<"$(sed -n 2p "$d/b.csv")"
        cw=$(grep -oE "comm-wait [0-9]+%" "$d/t.log" | tail -n 1 | grep -oE '[0-9]+')
        wall=$(awk '$1 == "wall" && $2 == "step" {print $3}' "$d/t.log")
        gsw=$(awk '$1 == "gradient" && $2 == "sync" {print $4}' "$d/t.log")
        opt=$(awk '$1 == "optimizer" {print $2}' "$d/t.log")
        tc=$(echo "$one_fwd + $one_bwd" | bc -l); bf=$(echo "$one_bwd / ($one_fwd + $one_bwd)" | bc -l)
        pred=$(predict_row "$tc" "$bf" "$B" "$gbs" "$alpha" 1)
        read -r p_step p_ar p_exp <<<"$pred"
        printf '   bucket %2s MB (%2s buckets): fwd %7.1f bwd %7.1f sync %7.1f overlap %7.1f hidden %3.0f%% step %7.1f ms | trainer comm-wait %s%% wall %s ms | model step %s AR %s exposed %s\n' \
          "$B" "$buckets" "$fwd" "$bwd" "$sync" "$ovl" "$(echo "$hidden * 100" | bc -l)" \
          "$(echo "$fwd + $ovl" | bc -l)" "$cw" "$wall" "$p_step" "$p_ar" "$p_exp"
        emit links.jsonl "{\"part\": \"links\", \"link\": \"$link\", \"hosts\": 2, \"ranks_per_host\": 1, \"dp\": 2, \"btl_tcp_links\": ${MN_TCP_LINKS:-2}, \"libnbc_iallreduce_algorithm\": \"${MN_IALLREDUCE:-default}\", \"model\": \"alexnet-67\", \"global_batch\": 16, \"bucket_mb\": $B, \"buckets\": $buckets, \"grad_mb\": $grad, \"pingpong_latency_us\": $lat, \"pingpong_mb_s\": $bw, \"measured\": {\"fwd_ms\": $fwd, \"bwd_ms\": $bwd, \"sync_after_backward_ms\": $sync, \"bwd_with_overlap_ms\": $ovl, \"hidden_fraction\": $hidden, \"step_ms\": $(echo "$fwd + $ovl" | bc -l | xargs printf '%.3f'), \"trainer_comm_wait_pct\": ${cw:-null}, \"trainer_wall_step_ms\": ${wall:-null}, \"trainer_sync_wait_ms\": ${gsw:-null}, \"trainer_optimizer_ms\": ${opt:-null}}, \"one_rank\": {\"fwd_ms\": $one_fwd, \"bwd_ms\": $one_bwd, \"optimizer_ms\": ${one_opt:-null}}, \"predicted_nominal\": {\"ib_gbs\": $gbs, \"alpha_us\": $alpha, \"compute_ms\": $(printf '%.3f' "$tc"), \"overlap\": 1, \"step_ms\": $p_step, \"allreduce_ms\": $p_ar, \"exposed_ms\": $p_exp}}"
      done
    done
    "$MN_CLUSTER" link "$MN_NAME" 1 clear; "$MN_CLUSTER" link "$MN_NAME" 2 clear
  )
  python3 "$HERE/calibrate.py" --build="$BUILD" "$OUT/links.jsonl" "$OUT/calibration.jsonl"
}

# The same link cut with Open MPI's and Linux's defaults (keepalive 300 s + 9 x 20 s,
# tcp_retries2 15): the watchdog still ends every rank it can reach, but mpirun's abort then
# waits for the lost host; recorded as a hang past the bound (the job is killed then).
part_untuned() {
  (
    export TCP_RETRIES2=15 KEEPALIVE_S=300 OMPI_MCA_oob_tcp_keepalive_intvl=20 \
      OMPI_MCA_oob_tcp_keepalive_probes=9
    mn_cluster 2
    echo "== a cut link with Open MPI's and Linux's defaults ($MN_NAME)"
    local dir=$MN_WORK/untuned
    mn_fault cut 2 "$T" "$dir" "$MN_WORK/untuned.log" 2 4 "${MN_CIFAR[@]}"
    local named
    named=$(grep -c "^trainer: error on rank" "$MN_WORK/untuned.log")
    echo "   exit $FAULT_CODE after ${FAULT_TOOK}s; $named rank line(s): ${FAULT_LINE:0:160}"
    emit faults_untuned.jsonl "{\"part\": \"fault_untuned\", \"kind\": \"cut\", \"host\": 2, \"model\": \"cifar10\", \"collective_timeout_s\": $T, \"tcp_retries2\": 15, \"oob_tcp_keepalive\": \"300 s + 9 x 20 s\", \"exit\": \"$FAULT_CODE\", \"seconds_watched\": $FAULT_TOOK, \"bound_s\": $((T + 30)), \"lines_naming_culprit\": $named, \"message\": $(json_str "$FAULT_LINE")}"
  )
}

# Open MPI's all-reduce between two hosts at 1 Gbit/s: blocking and non-blocking (the
# gradient buckets'), for one and two TCP connections per pair of ranks and for each of
# libnbc's algorithms; and both directions at once.
part_algorithms() {
  (
    mn_cluster 2
    local d=$MN_WORK links alg out
    mpicc -O2 -o "$d/probe" "$HERE/allreduce_probe.c" || mn_fail "mpicc allreduce_probe.c"
    "$MN_CLUSTER" link "$MN_NAME" 1 shape 1gbit; "$MN_CLUSTER" link "$MN_NAME" 2 shape 1gbit
    echo "== all-reduce of 93.4 MB between 2 hosts at 1 Gbit/s ($MN_NAME)"
    for links in 1 2; do
      for alg in default 1 2 3 4; do
        local extra=()
        [ "$alg" = default ] || extra=(--mca coll_libnbc_iallreduce_algorithm "$alg")
        out=$(MN_TCP_LINKS=$links MN_IALLREDUCE='' mn_mpirun 1 2 "${extra[@]}" "$d/probe" 2>&1) || mn_fail "probe: $out"
        local b nb bi
        b=$(echo "$out" | awk '$1 == "blocking" {print $2}')
        nb=$(echo "$out" | awk '$1 == "nonblocking" {print $2}')
        bi=$(echo "$out" | awk '$1 == "bidirectional" {print $2}')
        echo "   tcp links $links, libnbc algorithm $alg: blocking $b ms, non-blocking $nb ms, both ways at once $bi MB/s each"
        emit algorithms.jsonl "{\"part\": \"algorithms\", \"link\": \"1gbit\", \"hosts\": 2, \"ranks_per_host\": 1, \"bytes\": 93419048, \"btl_tcp_links\": $links, \"libnbc_iallreduce_algorithm\": \"$alg\", \"blocking_allreduce_ms\": $b, \"nonblocking_allreduce_ms\": $nb, \"sendrecv_both_ways_mb_s_each\": $bi}"
      done
    done
  )
}

main() {
  for p in "${parts[@]}"; do
    case $p in
    equivalence | alexnet | resume | faults | restart | links | untuned | algorithms) "part_$p" ;;
    *) echo "run.sh: unknown part $p" >&2; exit 2 ;;
    esac
  done
  python3 "$ROOT/scripts/record_commit.py" "$COMMIT" "$OUT" >/dev/null
}
main "$@"; exit $?
