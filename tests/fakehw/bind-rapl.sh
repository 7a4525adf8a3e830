#!/bin/sh
# bind-rapl.sh SIMDIR: run INSIDE a private mount namespace (unshare -m --propagation
# private). Makes the files of `raplsim run SIMDIR` appear where the kernel would put real
# RAPL hardware, for this namespace only:
#   SIMDIR/hw/msr/cpuN          -> /dev/cpu/N/msr   (over a tmpfs on /dev/cpu)
#   SIMDIR/hw/cpuinfo           -> /proc/cpuinfo
#   SIMDIR/hw/topology/cpuN/... -> /sys/devices/system/cpu/cpuN/topology/physical_package_id
#   SIMDIR/hw/powercap          -> /sys/class/powercap (the other classes are re-bound)
# so that our plugin and Slurm's C rapl plugin read the same simulated counters.
set -eu
sim=$1
hw=$sim/hw
[ -d "$hw/msr" ] || { echo "bind-rapl: $hw/msr missing (is raplsim running?)" >&2; exit 1; }

mount -t tmpfs -o mode=755 fake-cpu /dev/cpu
for f in "$hw"/msr/cpu*; do
    n=${f##*/cpu}
    mkdir -p "/dev/cpu/$n"
    : > "/dev/cpu/$n/msr"
    mount --bind "$f" "/dev/cpu/$n/msr"
done

mount --bind "$hw/cpuinfo" /proc/cpuinfo

for d in "$hw"/topology/cpu*; do
    cpu=${d##*/}
    target=/sys/devices/system/cpu/$cpu/topology/physical_package_id
    [ -e "$target" ] || { echo "bind-rapl: $target missing: simulate no more CPUs than the machine has" >&2; exit 1; }
    mount --bind "$d/physical_package_id" "$target"
done

# /sys/class is sysfs and cannot take a new directory: put a tmpfs over it, re-bind the
# real classes into it, and add powercap.
mkdir -p "$sim/ns-class"
mount --bind /sys/class "$sim/ns-class"
mount -t tmpfs -o mode=755 fake-class /sys/class
for c in "$sim"/ns-class/*; do
    name=${c##*/}
    [ "$name" = powercap ] && continue
    mkdir "/sys/class/$name"
    mount --bind "$c" "/sys/class/$name"
done
mkdir /sys/class/powercap
mount --bind "$hw/powercap" /sys/class/powercap
