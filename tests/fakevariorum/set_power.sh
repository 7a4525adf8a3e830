#!/bin/sh
# set_power.sh DIR WATTS: the fake libvariorum.so in DIR reports WATTS for the node, as the
# sum of CPU and memory power over two sockets (no power_node_watts key, so the plugin's
# sum rule is what counts). Each change is logged as "<unix time, ns> <watts>" in
# DIR/power.log: the true energy is the integral of that schedule.
set -eu
awk -v w="$2" 'BEGIN { printf "cpu0=%.3f mem0=%.3f cpu1=%.3f mem1=%.3f\n", w*0.5, w*0.1, w*0.3, w*0.1 }' > "$1/.power.tmp"
mv "$1/.power.tmp" "$1/power"
echo "$(date +%s%N) $2" >> "$1/power.log"
