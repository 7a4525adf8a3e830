#!/bin/sh
# NODE_HOOK for the test clusters (tests/src/bin/cluster.rs) (`node-hook.sh IDX NAME DIR`): node NAME sees the simulated
# RAPL hardware of `raplsim run $SIM_ROOT/NAME`; a node without a simulator keeps the
# machine's own (none, here). A hosts file the test wrote ($SIM_ROOT/hosts) is the node's
# /etc/hosts. SIM_ROOT is the cluster's settings' sim_root (tests/src/cluster/config.rs),
# which `cluster up` hands to each node's supervisor and so to this hook.
set -eu
root=${SIM_ROOT:?SIM_ROOT unset}
# the test's /etc/hosts (BMC names), in this node's private mount namespace only
if [ -f "$root/hosts" ]; then
    mount --bind "$root/hosts" /etc/hosts
fi
sim=$root/$2
[ -d "$sim/hw" ] || exit 0
exec "$(dirname "$0")/bind-rapl.sh" "$sim"
