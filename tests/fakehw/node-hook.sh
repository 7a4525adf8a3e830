#!/bin/sh
# NODE_HOOK for the test clusters (tests/src/bin/cluster.rs) (`node-hook.sh IDX NAME DIR`): node NAME sees the simulated
# RAPL hardware of `raplsim run $SIM_ROOT/NAME` (and hwmon's of `hwmonsim run`); a node without a simulator keeps the
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
# a simulated hwmon class (hwmonsim run $SIM_ROOT/NAME) over the machine's, in this node's
# private mount namespace only: rust_hwmon reads its default /sys/class/hwmon
if [ -d "$sim/hwmon" ]; then
    sh "$(dirname "$0")/bind-hwmon.sh" "$sim"
fi
[ -d "$sim/hw" ] || exit 0
exec "$(dirname "$0")/bind-rapl.sh" "$sim"
