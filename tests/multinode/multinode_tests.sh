#!/usr/bin/env bash
# Multi-node behaviour on a cluster of namespace hosts made for the test (cluster.sh): MPI
# over TCP between hosts and shared memory inside one, the trainer's node count as MPI sees
# it, the (dp, mp) equivalence suite across hosts, and a fault that must end the job.
#   multinode_tests.sh CASE BUILD_DIR [EQUIVALENCE_TEST]
# Cases:
#   layout        2 hosts x 2 ranks: "on 2 node(s)" in the banner, TCP between the hosts and
#                 shared memory (vader) inside each (Open MPI's btl_base_verbose), an mp
#                 group that would span the hosts refused (exit 2)
#   equivalence   the equivalence suite (parallel_equivalence_test) on 2 hosts x 2 ranks: the
#                 layouts (4,1) and (2,2) against one rank (EQUIV_FILTER: a gtest filter; the
#                 default leaves out the minute-long AlexNet case, which the experiments run)
#   fault_cut     cifar10-80sec on 2 hosts x 2 ranks, host 2's link cut silently mid-step:
#                 the job ends with exit 5 within --collective_timeout (10 s) + 30 s, every
#                 rank of host 1 naming ranks 2, 3 on host 2; the checkpoints stay valid and
#                 the newest resumes
# Skips (77) only where namespaces cannot be made (not root, no ip/tc/unshare/nsenter), and
# fails there under COLONNADE_NO_SKIP=1 (CI).
set -uo pipefail
case_name=$1; BUILD=$2; EQUIV=${3:-}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
T=${FAULT_TIMEOUT:-10}

main() {
  mn_cluster 2
  h1=$(mn_host 1); h2=$(mn_host 2)
  echo "cluster $MN_NAME: $h1, $h2"

  case $case_name in
  layout)
    # The banner's node count is what MPI_COMM_TYPE_SHARED sees: two hosts.
    mn_mpirun 2 4 --mca btl_base_verbose 100 "$BUILD/trainer" "${MN_ALEX[@]}" --mp=2 --steps=1 \
      >"$MN_WORK/log" 2>&1 || { tail -n 20 "$MN_WORK/log"; mn_fail "the 2 x 2 run failed"; }
    grep "layout" "$MN_WORK/log"
    grep -q "world 4 = dp 2 x mp 2 on 2 node(s)" "$MN_WORK/log" || mn_fail "the banner does not say 2 nodes"
    # Ranks 0 and 1 on host 1, 2 and 3 on host 2 (Open MPI fills hosts slot by slot).
    for r in 0 1; do
      grep -q "^\[$h1:[0-9]*\] mca: bml: Using tcp btl for send to \[\[[0-9]*,1\],$((r + 2))\]" \
        "$MN_WORK/log" || mn_fail "no TCP from host 1 to rank $((r + 2))"
      grep -q "^\[$h1:[0-9]*\] mca: bml: Using vader btl for send to \[\[[0-9]*,1\],$r\]" \
        "$MN_WORK/log" || mn_fail "no shared memory to rank $r inside host 1"
    done
    grep -q "^\[$h2:[0-9]*\] mca: bml: Using vader btl for send to \[\[[0-9]*,1\],2\]" "$MN_WORK/log" \
      || mn_fail "no shared memory inside host 2"
    if grep -q "^\[$h1:[0-9]*\] mca: bml: Using tcp btl for send to \[\[[0-9]*,1\],[01]\]" "$MN_WORK/log"; then
      mn_fail "TCP inside host 1"
    fi
    grep -E "Using (tcp|vader) btl" "$MN_WORK/log" | sort | uniq | head -n 8
    # --mp=4 would put one model-parallel group on both hosts: refused by every rank.
    mn_train 2 4 "$MN_WORK/log4" "${MN_ALEX[@]}" --columns=4 --mp=4 --steps=1; code=$?
    tail -n 1 "$MN_WORK/log4"
    grep -q "spans two nodes" "$MN_WORK/log4" || mn_fail "an mp group across hosts was not refused"
    [ "$code" = 2 ] || mn_fail "exit $code for an mp group across hosts, expected 2"
    ;;
  equivalence)
    [ -x "$EQUIV" ] || mn_fail "no equivalence test binary: $EQUIV"
    filter=${EQUIV_FILTER:-Equivalence.ColumnTestNet*:Equivalence.InPlace*:Equivalence.ShardInit*}
    mn_mpirun 2 4 "$EQUIV" --gtest_filter="$filter" >"$MN_WORK/log" 2>&1; code=$?
    grep -E "^\[equivalence\]|PASSED|FAILED|Failure" "$MN_WORK/log"
    [ "$code" = 0 ] || { tail -n 30 "$MN_WORK/log"; mn_fail "the equivalence suite failed across hosts"; }
    grep -q "(dp 2, mp 2)" "$MN_WORK/log" || mn_fail "the (2, 2) layout did not run"
    grep -q "(dp 4, mp 1)" "$MN_WORK/log" || mn_fail "the (4, 1) layout did not run"
    ;;
  fault_cut)
    mn_fault cut 2 "$T" "$MN_WORK/ckpt" "$MN_WORK/log" 2 4 "${MN_CIFAR[@]}"
    grep -E "error on rank|exited|lost" "$MN_WORK/log" | cut -c1-200
    echo "fault after step $FAULT_STEP: exit $FAULT_CODE, ${FAULT_TOOK}s after the cut"
    [ "$FAULT_CODE" != hang ] || mn_fail "the job did not end within --collective_timeout + 30 s"
    [ "$FAULT_CODE" = 5 ] || mn_fail "exit code $FAULT_CODE, expected 5 (a rank stopped answering)"
    for r in 0 1; do
      grep -q "^trainer: error on rank $r (host $h1): ranks 2, 3 on host $h2 stopped answering" \
        "$MN_WORK/log" || mn_fail "rank $r did not name ranks 2, 3 on host $h2"
    done
    n=$(mn_checkpoints_valid "$MN_WORK/ckpt") || mn_fail "$n"
    newest=$(last_ckpt "$MN_WORK/ckpt")
    last_written=$(grep -oE "^checkpoint step [0-9]+" "$MN_WORK/log" | tail -n 1 | grep -oE '[0-9]+$')
    [ "$(ckpt_step "$newest")" = "$last_written" ] || mn_fail "the newest checkpoint is not the last one written"
    echo "$n valid checkpoint(s), newest $newest; partial writes left: $(mn_partial_writes "$MN_WORK/ckpt" | wc -l)"
    # The job resumes from it on the same hosts.
    at=$(ckpt_step "$newest")
    mn_train 2 4 "$MN_WORK/log2" "${MN_CIFAR[@]}" --steps=$((at + 2)) --checkpoint_dir="$MN_WORK/ckpt" \
      --checkpoint_lock_wait_s=1 || { tail "$MN_WORK/log2"; mn_fail "the resumed job failed"; }
    grep -q "resumed    from $newest at step $at" "$MN_WORK/log2" || mn_fail "did not resume from $newest"
    grep -q "^done: $((at + 2)) steps" "$MN_WORK/log2" || mn_fail "the resumed job did not finish"
    [ -z "$(mn_partial_writes "$MN_WORK/ckpt")" ] || mn_fail "partial writes left after the resumed job's checkpoint"
    ;;
  *) mn_fail "unknown case $case_name" ;;
  esac
  echo "ok: $case_name"
}
main "$@"; exit $?
