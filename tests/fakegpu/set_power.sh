#!/bin/sh
# set_power.sh DIR MINOR WATTS: from now on the stand-in GPU with device-file minor MINOR
# (in the library in DIR) draws WATTS. MINOR "self": the one NVIDIA GPU the calling
# process's devices cgroup allows (what Slurm gave the job), found as the plugin finds it.
set -eu
minor=$2
if [ "$minor" = self ]; then
    cg=$(sed -n 's/^[0-9]*:devices://p' /proc/self/cgroup)
    minor=$(sed -n 's/^c 195:\([0-9][0-9]*\) .*/\1/p' "/sys/fs/cgroup/devices$cg/devices.list")
    [ "$(echo "$minor" | wc -w)" = 1 ] || { echo "set_power.sh: not one GPU in $cg: $minor" >&2; exit 1; }
fi
echo "$(date +%s%N) $minor $3" >> "$1/power.log"
