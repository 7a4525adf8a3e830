#!/bin/sh
# bind-hwmon.sh SIMDIR: run INSIDE a private mount namespace. Makes the tree of
# `hwmonsim run SIMDIR` (SIMDIR/hwmon) the namespace's /sys/class/hwmon. Where the machine
# has a /sys/class/hwmon it is bound over; where not (a container's sysfs), /sys/class
# (sysfs, which takes no new directory) gets a tmpfs over it into which the real classes
# are bound again beside hwmon, as bind-rapl.sh does for powercap. Not with bind-rapl.sh on
# one node: each puts its own tmpfs over /sys/class.
set -eu
sim=$1
[ -d "$sim/hwmon" ] || { echo "bind-hwmon: $sim/hwmon missing (is hwmonsim running?)" >&2; exit 1; }
if [ -d /sys/class/hwmon ]; then
    mount --bind "$sim/hwmon" /sys/class/hwmon
    exit 0
fi
mkdir -p "$sim/ns-class"
mount --bind /sys/class "$sim/ns-class"
mount -t tmpfs -o mode=755 fake-class /sys/class
for c in "$sim"/ns-class/*; do
    name=${c##*/}
    mkdir "/sys/class/$name"
    mount --bind "$c" "/sys/class/$name"
done
mkdir /sys/class/hwmon
mount --bind "$sim/hwmon" /sys/class/hwmon
