#!/bin/sh
# use_gpu.sh DIR MINORS SM [detached]: the calling shell (this script's parent) uses the GPU
# Slurm gave it at SM percent from now on, while it lives; MINORS as set_power.sh's "gres:"
# list. Appends "<pid> <sm>" to DIR/procs.<minor>, which the stand-in NVML reports.
# "detached": the use is a double-forked process instead (setsid; its parent, this script,
# exits at once: init adopts it, or the nearest subreaper, the test cluster's node supervisor),
# which appends its pid only once adopted and lives on until killed (proctrack/cgroup kills
# it with its step), 10 minutes at most; it writes its parent and its cgroups into
# DIR/adopted.<pid>.
set -eu
index=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}
index=${index%%,*}
[ -n "$index" ] || { echo "use_gpu.sh: no GPU given by Slurm" >&2; exit 1; }
minor=$(echo "$2" | cut -d, -f$((index + 1)))
if [ "${4:-}" = detached ]; then
    setsid sh -c 'while kill -0 "$3" 2>/dev/null; do sleep 0.05; done
        { echo "parent $(cut -d" " -f4 /proc/$$/stat)"; cat /proc/$$/cgroup; } >"$4/adopted.$$"
        echo "$$ $2" >>"$1"; exec sleep 600' \
        sh "$1/procs.$minor" "$3" $$ "$1" </dev/null >/dev/null 2>&1 &
    exit 0
fi
echo "$PPID $3" >> "$1/procs.$minor"
