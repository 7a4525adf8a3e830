#!/bin/sh
# Runs as the last step before slurmd, already INSIDE the node's private mount
# and UTS namespaces (and its network namespace when the cluster is isolated),
# e.g.:  unshare --mount --uts --propagation private -- node-start.sh ...
# Everything done here (NODE_HOOK bind mounts, hostname) is therefore only
# visible to this slurmd and the slurmstepds/tasks it forks.
#
# usage: node-start.sh INDEX NAME DIR SLURMD-COMMAND [ARGS...]
# env:   NODE_HOOK (optional executable, run as: NODE_HOOK INDEX NAME DIR)
set -u
idx=$1 name=$2 dir=$3
shift 3

# Give the node its own hostname so `srun hostname` shows n1, n2, ...
hostname "$name" 2>/dev/null || printf '%s\n' "$name" >/proc/sys/kernel/hostname || exit 96

# This node's own munged, when it has one (multi-node clusters): its socket directory
# takes the place of the one slurm.conf names (AuthInfo=socket=DIR/run/munge/munge.sock).
if [ -d "$dir/run/munge-$name" ]; then
    mount --bind "$dir/run/munge-$name" "$dir/run/munge" || exit 95
fi

# Remember this mount namespace: `cluster down` (tests/src/cluster/netns.rs) uses it as a fallback to find
# leftover processes of this node should the supervisor itself have been killed.
readlink /proc/self/ns/mnt >>"$dir/run/mntns"

if [ -n "${NODE_HOOK:-}" ]; then
    "$NODE_HOOK" "$idx" "$name" "$dir" >"$dir/log/hook-$name.log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "node-start: NODE_HOOK $NODE_HOOK $idx $name $dir failed with status $rc" >&2
        cat "$dir/log/hook-$name.log" >&2
        exit 97
    fi
fi

# A pure cgroup v2 host for Slurm's cgroup/v2 (the cluster's CGROUP_V2): this machine's
# controllers are bound to v1 hierarchies, but its unified hierarchy counts every cgroup's
# CPU time and can freeze and kill them. slurmd gets its own subtree CGROUP2_ROOT of it as
# the root of a cgroup namespace, mounted at /sys/fs/cgroup, so that every path it and
# its slurmstepds read in /proc/PID/cgroup is one under that mount, as on a v2 host; Slurm
# makes its slurmstepds' scope in system.slice, which it expects systemd to have made.
# /proc/PID/cgroup still lists the v1 hierarchies before that line, which Slurm takes for
# a hybrid host and stops: init's (read by 26.05) shows `0::/` here (init, outside the
# namespace, shown at its root as in a container), and each process's own
# (/proc/self/cgroup, read by slurmd and every slurmstepd) its v2 line alone, through
# cgroup2-only.so (built by `cluster up`).
if [ -n "${CGROUP2_ROOT:-}" ]; then
    mkdir -p "$CGROUP2_ROOT/system.slice" && echo $$ >"$CGROUP2_ROOT/cgroup.procs" || exit 94
    printf '0::/\n' >"$dir/run/cgroup2-init" || exit 94
    export LD_PRELOAD="$dir/run/cgroup2-only.so"
    exec unshare --cgroup -- sh -c 'mount -t cgroup2 cgroup2 /sys/fs/cgroup &&
        mount --bind "$1" /proc/1/cgroup || exit 94
        shift; exec "$@"' sh "$dir/run/cgroup2-init" "$@"
fi

exec "$@"
