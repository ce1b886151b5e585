#!/usr/bin/env bash
# Open MPI's remote shell for the namespace hosts of cluster.sh (--mca plm_rsh_agent): called
# as `rsh_agent.sh HOST COMMAND...` like ssh, it runs COMMAND with /bin/sh inside the network
# and UTS namespaces of the cluster host whose address or name is HOST, so the orted (and the
# ranks it starts) live on that host. The cluster's state directory comes from
# $COLONNADE_MN_CLUSTER (cluster.sh mpirun sets it).
set -u
dir=${COLONNADE_MN_CLUSTER:?rsh_agent.sh: COLONNADE_MN_CLUSTER is not set (use cluster.sh mpirun)}
# Options ssh would take (Open MPI passes none to an agent it does not know, but be safe).
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=${1:?rsh_agent.sh: no host}; shift
k=$(awk -v h="$host" '$2 == h || $3 == h {print $1}' "$dir/hosts")
if [ -z "$k" ]; then
  echo "rsh_agent.sh: $host is not a host of the cluster in $dir" >&2
  exit 255
fi
name=$(basename "$dir")
exec nsenter --net="/run/netns/$name-h$k" --uts="$dir/uts-h$k" -- /bin/sh -c "$*"
