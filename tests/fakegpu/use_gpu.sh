#!/bin/sh
# use_gpu.sh DIR MINORS SM: the calling shell (this script's parent) uses the GPU Slurm gave
# it at SM percent from now on, while it lives; MINORS as set_power.sh's "gres:" list.
# Appends "<pid> <sm>" to DIR/procs.<minor>, which the stand-in NVML reports.
set -eu
index=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}
index=${index%%,*}
[ -n "$index" ] || { echo "use_gpu.sh: no GPU given by Slurm" >&2; exit 1; }
minor=$(echo "$2" | cut -d, -f$((index + 1)))
echo "$PPID $3" >> "$1/procs.$minor"
