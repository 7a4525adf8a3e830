#!/bin/sh
# set_power.sh DIR MINOR WATTS: from now on the stand-in GPU with device-file minor MINOR
# (in the library in DIR) draws WATTS; the change is logged in DIR/power.log.
# MINOR "self:DEVDIR": the one GPU among DEVDIR/nvidia* that the calling process may open
# (what Slurm's devices cgroup gave the job; denied files fail with "Operation not
# permitted", allowed ones reach the absent driver: "No such device or address").
# MINOR "gres:M0,M1,...": the GPU Slurm gave the caller, its first GRES index in
# SLURM_STEP_GPUS (else SLURM_JOB_GPUS) taken as a place in the list of minors (gres.conf's
# order, as the test wrote it).
set -eu
minor=$2
case $minor in
self:*)
    found=
    for f in "${minor#self:}"/nvidia*; do
        if (: <"$f") 2>&1 | grep -q "No such device"; then
            found="$found ${f##*/nvidia}"
        fi
    done
    [ "$(echo $found | wc -w)" = 1 ] || { echo "set_power.sh: not one GPU allowed: '$found'" >&2; exit 1; }
    minor=$(echo $found)
    ;;
gres:*)
    index=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}
    index=${index%%,*}
    [ -n "$index" ] || { echo "set_power.sh: no GPU given by Slurm" >&2; exit 1; }
    minor=$(echo "${minor#gres:}" | cut -d, -f$((index + 1)))
    [ -n "$minor" ] || { echo "set_power.sh: GRES index $index not in ${2#gres:}" >&2; exit 1; }
    ;;
esac
echo "$(date +%s%N) $minor $3" >> "$1/power.log"
