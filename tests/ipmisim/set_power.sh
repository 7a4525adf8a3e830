#!/bin/sh
# Change the simulated node power while ipmi_sim runs:  set_power.sh RUNDIR WATTS
# The SDR sensor is re-polled every 100 ms (it rounds to 4 W); DCMI reads the file per request.
# Each change is logged as "<unix time, ns> <watts>" in RUNDIR/power.log: the true energy is
# the integral of that schedule.
echo "$2" > "$1/power_watts.tmp" && mv "$1/power_watts.tmp" "$1/power_watts" && echo "$(date +%s%N) $2" >> "$1/power.log"
