#!/bin/sh
# Start a simulated BMC (OpenIPMI ipmi_sim) on loopback for IPMI tests.
#   start_sim.sh RUNDIR [WATTS] [PORT]
# RMCP/RMCP+ on 127.0.0.1:PORT/udp (default 9623), console on 127.0.0.1:PORT+1/tcp.
# Users: slurm/slurmpass (admin), reader/readpass (user).
# Power comes from RUNDIR/power_watts (integer watts); change it with set_power.sh.
# Needs Debian packages openipmi and libopenipmi-dev (and gcc) for the DCMI module.
# Prints the simulator's PID and writes RUNDIR/ipmi_sim.pid.
set -e
SIM=$(cd "$(dirname "$0")" && pwd)
RUN=$(mkdir -p "$1" && cd "$1" && pwd)
PORT=${3:-9623}
rm -rf "$RUN/state"; mkdir -p "$RUN/state"
"$SIM/set_power.sh" "$RUN" "${2:-200}"
[ -f "$RUN/dcmi_power.so" ] || gcc -shared -fPIC -O2 -Wall -o "$RUN/dcmi_power.so" "$SIM/dcmi_power.c"
sed -e "s#@RUN@#$RUN#g" -e "s#@SIM@#$SIM#g" -e "s#addr 127.0.0.1 9623#addr 127.0.0.1 $PORT#" \
    -e "s#console 127.0.0.1 9624#console 127.0.0.1 $((PORT + 1))#" "$SIM/lan.conf.in" > "$RUN/lan.conf"
sed -e "s#@RUN@#$RUN#g" -e "s#@SIM@#$SIM#g" "$SIM/powersim.emu.in" > "$RUN/powersim.emu"
ipmi_sim -n -d -c "$RUN/lan.conf" -f "$RUN/powersim.emu" -s "$RUN/state" > "$RUN/ipmi_sim.log" 2>&1 &
echo $! > "$RUN/ipmi_sim.pid"
sleep 1
cat "$RUN/ipmi_sim.pid"
