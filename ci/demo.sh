#!/usr/bin/env bash
# demo.sh: per-job joules from sacct beside the true joules, in one command.
# Wants a disposable Debian 12 machine, as root: it installs what it needs into the machine
# (ci/deps.sh: Debian packages with apt, among them Slurm's daemons, munge, MariaDB and
# Prometheus, whose systemd units apt enables for the next boot without starting them;
# sushy-tools under /var/cache/rust-energy-slurm; rustup into root's home where no cargo is
# found), builds the plugins, starts a private Slurm
# cluster on loopback whose node sees a simulated 2-socket AMD machine (RAPL counters that
# wrap every ~15 s, which Slurm's own rapl plugin cannot even read), runs a job whose power
# changes in three steps, prints sacct ConsumedEnergy beside the simulator's truth,
# senergy's report of the job (its node's figures kept by the Epilog, by part) and its
# summary, and tears everything down.
# run as `sh ci/demo.sh` too: the script is bash's (dash has no pipefail)
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
say() { printf '\n== %s\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "demo.sh needs root: it runs Slurm daemons and mounts simulated hardware in a private namespace" >&2; exit 1; }
# In a mount namespace of its own, where the simulator's files are in memory (below), as the
# kernel keeps the msr device: on a disk, a busy machine's journal holds the simulator's
# writes back for hundreds of milliseconds, and its counters stand still and then jump,
# which no hardware does (a step's peak power read 792 W for 610 W so, while builds ran).
if [ -z "${RUST_ENERGY_DEMO_NS:-}" ]; then
    RUST_ENERGY_DEMO_NS=1 exec unshare --mount --propagation private -- bash "$0" "$@"
fi

say "installing dependencies (Debian packages; skipped when present)"
sh ci/deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
say "building the plugins, the RAPL simulator and the test cluster harness"
cargo build --release --workspace --quiet

work=$(mktemp -d /tmp/rust-energy-demo.XXXXXX)
sim=$work/sim/n1
cleanup() {
    target/release/cluster down "$work/cluster" >/dev/null 2>&1 || true
    [ -n "${simpid:-}" ] && kill "$simpid" 2>/dev/null || true
    umount "$sim" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/plugins" "$sim"
mount -t tmpfs -o size=16m,mode=0755 rust-energy-demo-hw "$sim"
cp target/release/libacct_gather_energy_rust_rapl.so "$work/plugins/acct_gather_energy_rust_rapl.so"
cpus=$(nproc); packages=2
[ "$cpus" -ge 2 ] || packages=1
cpus=$((cpus / packages * packages))
say "simulating $packages AMD sockets ($cpus CPUs): 2^-20 J counter unit, a wrap every 4096 J"
target/release/raplsim run "$sim" --vendor amd --packages "$packages" --cpus "$cpus" --esu 20 &
simpid=$!
sleep 0.5

# the nodes' Epilog keeps the node's figures with the job (SystemComment), as a site sets it
printf '#!/bin/sh\nSENERGY=%s exec %s\n' "$repo/target/release/senergy" "$repo/conf/epilog.senergy" >"$work/epilog.sh"
chmod 0755 "$work/epilog.sh"
printf 'PrologFlags=Contain\nEpilog=%s\n' "$work/epilog.sh" > "$work/slurm.conf.extra"
printf 'EnergyRaplSource=msr\n' > "$work/acct_gather.conf"
say "starting a private Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, slurmd) with AcctGatherEnergyType=acct_gather_energy/rust_rapl"
NODES=1 ENERGY_TYPE=acct_gather_energy/rust_rapl EXTRA_PLUGIN_DIR="$work/plugins" \
    ACCT_GATHER_CONF="$work/acct_gather.conf" EXTRA_SLURM_CONF="$work/slurm.conf.extra" \
    NODE_FREQ=5 JOBACCT_FREQ=5 NODE_HOOK="$repo/tests/fakehw/node-hook.sh" SIM_ROOT="$work/sim" \
    target/release/cluster up "$work/cluster"
eval "$(target/release/cluster env "$work/cluster")"

rs=$repo/target/release/raplsim
phase() { # name power... : one srun step that sets each power for its seconds, then 0 W
    local name=$1; shift
    local body="$rs mark $sim ${name}_start;"
    while [ $# -gt 0 ]; do body="$body $rs set $sim $1; sleep $2;"; shift 2; done
    echo "srun -n1 --job-name=$name sh -c '$body $rs set $sim all=0; $rs mark $sim ${name}_end'"
}
cat > "$work/job.sh" <<JOB
#!/bin/sh
$(phase compute "package0=260 package1=280" 12 "package0=310 package1=300" 6)
$(phase io "package0=120 package1=110" 8)
$(phase mixed "package0=200 package1=150" 10)
JOB
say "submitting a 3-step job whose power changes (about 40 s)"
job=$(sbatch --parsable -o /dev/null "$work/job.sh")
echo "job $job"
sleep 10
echo "live: sstat -j $job.0: $(sstat -n -P -j "$job.0" -o ConsumedEnergyRaw 2>/dev/null || echo n/a) J"
echo "live: $(scontrol show node n1 | grep -o 'CurrentWatts=[^ ]* AveWatts=[^ ]*') (simulated now: 540 W)"
while sacct -n -P -j "$job" -o State | grep -qE 'RUNNING|PENDING|COMPLETING'; do sleep 2; done
sleep 1

truth() { awk -v n="$1" '$1==n {print $2}' "$sim/marks"; }
between() { awk -v a="$(truth "$1")" -v b="$(truth "$2")" 'BEGIN{printf "%.3f", b-a}'; }
say "sacct ConsumedEnergy beside the true joules"
printf '%-12s %-8s %12s %14s %9s\n' JobID Name "sacct (J)" "true (J)" error
sacct -n -P -j "$job" -o JobID,JobName,ConsumedEnergyRaw | while IFS='|' read -r id name joules; do
    case "$id" in
        *.0) t=$(between compute_start compute_end) ;;
        *.1) t=$(between io_start io_end) ;;
        *.2) t=$(between mixed_start mixed_end) ;;
        *) t=$(between compute_start mixed_end) ;; # job, batch, extern: power is off between steps
    esac
    awk -v id="$id" -v n="$name" -v m="$joules" -v t="$t" \
        'BEGIN{ if (m=="") printf "%-12s %-8s %12s %14.3f %9s\n", id, n, "-", t, "-";
                else printf "%-12s %-8s %12d %14.3f %8.3f%%\n", id, n, m, t, 100*(m-t)/t }'
done
say "senergy job $job (the intensity and price are examples)"
target/release/cluster client "$work/cluster" target/release/senergy job "$job" \
    --carbon-intensity 350 --price 0.25 --currency EUR
say "senergy job $job --summary (what the end-of-job mail adds, with MailProg=senergy)"
target/release/cluster client "$work/cluster" target/release/senergy job "$job" --summary \
    --carbon-intensity 350 --price 0.25 --currency EUR
say "tearing down"
