#!/bin/sh
# Make the simulated BMC's DCMI power reading say WATTS for SECS while the node's power (and
# the truth, RUN/power.log) is unchanged, as a BMC answering nonsense does:
#   glitch_power.sh RUNDIR WATTS SECS
until=$(( $(date +%s%N) + $(awk "BEGIN { printf \"%d\", $3 * 1e9 }") ))
echo "$2 $until" > "$1/power_watts_glitch.tmp" && mv "$1/power_watts_glitch.tmp" "$1/power_watts_glitch"
