#!/bin/sh
# NODE_HOOK for ci/cluster.sh (`node-hook.sh IDX NAME DIR`): node NAME sees the simulated
# RAPL hardware of `raplsim run $SIM_ROOT/NAME`; a node without a simulator keeps the
# machine's own (none, here).
set -eu
sim=${SIM_ROOT:?SIM_ROOT unset}/$2
[ -d "$sim/hw" ] || exit 0
exec "$(dirname "$0")/bind-rapl.sh" "$sim"
