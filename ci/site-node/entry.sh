#!/bin/bash
# entry.sh: the site node's scenario, run inside the VM by site-node-payload.service (a
# oneshot at every boot, ci/site-node/build-image.sh) from the payload disk at /payload
# (tests/tests/site_node.rs stages it). It sets the node up as a site does (Debian's units,
# the package installed with apt, README's Configure blocks), runs the jobs as an ordinary
# user, and writes raw figures, one `R KEY VALUE...` line each, to /dev/ttyS1, which the
# host captures: the host computes each expected figure from the simulator's truth and
# asserts. It reboots once (phase file /var/lib/site-node/phase), and powers off at the end.
# What it does is said on the console (ttyS0) too.
set -u
P=/payload
STATE=/var/lib/site-node
SIM=/run/raplsim
LIB=/usr/local/lib/site-node
RAPLSIM=$LIB/raplsim
USER_NAME=alice
export P STATE SIM LIB RAPLSIM USER_NAME
mkdir -p "$STATE"
exec 3>/dev/ttyS1

say() { echo "site-node: $*" >/dev/ttyS0; }
# R KEY VALUE...: one result line for the host
R() { echo "R $*" >&3; say "R $*"; }
truth() { "$RAPLSIM" truth "$SIM"; }
as_user() { runuser -u "$USER_NAME" -- "$@"; }
finish() {
    R done "$1"
    sync
    systemctl poweroff
    exit 0
}
# wait_for SECONDS WHAT COMMAND...: polls COMMAND (each try 20 s at most) every half second
# for SECONDS of wall time; on a timeout says so, with the journal of the Slurm units
wait_for() {
    local until=$((SECONDS + $1)) what=$2
    shift 2
    until timeout 20 bash -c '"$@"' wait_for "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$until" ]; then
            R timeout "$what"
            journalctl -b -u slurmdbd -u slurmctld -u slurmd -u mariadb --no-pager -o short-monotonic |
                tail -n 30 | while read -r l; do R journal "$l"; done
            return 1
        fi
        sleep 0.5
    done
}
job_state() { sacct -n -X -P -j "$1" -o State 2>/dev/null | head -n 1; }
job_done() { case $(job_state "$1") in COMPLETED* | FAILED* | TIMEOUT* | CANCELLED* | NODE_FAIL* | OUT_OF_ME*) return 0 ;; esac; return 1; }
job_running() { [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = RUNNING ]; }
# submit NAME SCRIPT: sbatch as the ordinary user, prints the job id
submit() {
    printf '%s\n' "$2" >"/home/$USER_NAME/$1.sh"
    chown "$USER_NAME:" "/home/$USER_NAME/$1.sh"
    (cd "/home/$USER_NAME" && as_user sbatch --parsable -J "$1" -o "/home/$USER_NAME/$1.out" "$1.sh")
}
live() { sstat -n -P -j "$1" -o ConsumedEnergyRaw 2>/dev/null | head -n 1; }
live_ok() { live "$1" | grep -Eq '^[0-9]+$'; }
# the job's cgroup v2 directory, from where its extern step's slurmstepd runs
job_cgroup() {
    local pid path
    pid=$(pgrep -f "^slurmstepd: \[$1\.extern\]" | head -n 1) || return 1
    [ -n "$pid" ] || return 1
    path=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
    path=${path%%/step_*}
    echo "/sys/fs/cgroup$path"
}
cpu_usec() { sed -n 's/^usage_usec //p' "$(job_cgroup "$1")/cpu.stat"; }
ledger() { echo /var/lib/slurm/slurmd/energy-ledger.0.json; }
# the ledger's learned static power (floor_watts), once it has one
floor_watts() { sed -n 's/.*"floor_watts": *\([0-9.eE+-]*\).*/\1/p' "$(ledger)" 2>/dev/null | head -n 1; }
floor_learned() { [ -n "$(floor_watts)" ]; }
# final figure of job J: its job line (the extern step's, PrologFlags=Contain)
final_energy() { sacct -n -X -P -j "$1" -o ConsumedEnergyRaw | head -n 1; }
sim_set() { "$RAPLSIM" set "$SIM" "$1"; }
units_report() {
    local u state
    for u in munge mariadb slurmdbd slurmctld slurmd raplsim fake-rapl; do
        state=$(systemctl is-active "$u.service")
        R unit "$1" "$u" "$state"
        # a unit down: all it said in this boot, and how systemd saw it end
        [ "$state" = active ] || {
            journalctl -b -u "$u.service" --no-pager -o short-monotonic | tail -n 40 |
                while read -r l; do R unit_journal "$u" "$l"; done
            systemctl status --no-pager "$u.service" 2>&1 | head -n 15 |
                while read -r l; do R unit_status "$u" "$l"; done
        }
    done
}
node_idle() { sinfo -h -n sitenode1 -o %t | grep -Eq '^(idle|mix|alloc)'; }
ledger_errors() { journalctl -b -u slurmd --no-pager -o cat | grep -c "no energy ledger is published" || true; }

# what wait_for's bash runs
export -f R say truth as_user job_state job_done job_running live live_ok job_cgroup cpu_usec \
    ledger floor_watts floor_learned node_idle

# alone NAME SECONDS: an ordinary user's job alone on the node, the node at 300 W for
# SECONDS while it runs and 0 W before and after: its figure is the truth over that window.
# With RESTART set, slurmd is restarted by its unit in the middle of the window.
alone() {
    local name=$1 secs=$2 job on off
    sim_set package0=0
    job=$(submit "$name" "#!/bin/sh
#SBATCH -n1 -c1
while [ ! -e /home/$USER_NAME/$name.stop ]; do :; done
")
    R job "$name" "$job"
    last_job=$job
    wait_for 120 "$name running" job_running "$job" || return 1
    wait_for 60 "$name live figure" live_ok "$job.extern" || return 1
    on=$(truth)
    sim_set package0=300
    if [ -n "${RESTART:-}" ]; then
        sleep $((secs / 2))
        local t0=$SECONDS
        systemctl restart slurmd
        R restart_seconds "$name" $((SECONDS - t0))
        R unit_after_restart "$name" "$(systemctl is-active slurmd.service)"
        sleep $((secs - secs / 2))
    else
        sleep "$secs"
        # senergy as the user, on the node, mid-job
        as_user senergy check --json >"$STATE/check-$name.json" 2>"$STATE/check-$name.err"
        R senergy_check_rc "$name" $?
        R senergy_check_json "$name" "$(tr -d '\n' <"$STATE/check-$name.json")"
        R senergy_check_err "$name" "$(tr '\n' ' ' <"$STATE/check-$name.err")"
        # and as root, as docs/senergy.md runs it: its power against the truth's 300 W
        senergy check --json >"$STATE/check-root-$name.json" 2>"$STATE/check-root-$name.err"
        R senergy_check_root_rc "$name" $?
        R senergy_check_root_json "$name" "$(tr -d '\n' <"$STATE/check-root-$name.json")"
    fi
    sim_set package0=0
    off=$(truth)
    R window "$name" "$on" "$off"
    touch "/home/$USER_NAME/$name.stop"
    wait_for 120 "$name done" job_done "$job" || return 1
    R final "$name" "$job" "$(final_energy "$job")" "$(job_state "$job")"
    sacct -n -P -j "$job" -o JobID,ConsumedEnergyRaw,State | while read -r line; do R sacct "$name" "$line"; done
}

# the Epilog's record of job J (SystemComment; AdminComment is the site's and left alone),
# and `senergy job J --json` as the user
record() {
    local name=$1 job=$2 t=0 comment=""
    while [ "$t" -lt 60 ]; do
        comment=$(sacct -n -X -P -j "$job" -o SystemComment 2>/dev/null | head -n 1)
        case $comment in *senergy*) break ;; esac
        sleep 1
        t=$((t + 1))
    done
    R system_comment "$name" "$job" "$comment"
    R admin_comment "$name" "$job" "$(sacct -n -X -P -j "$job" -o AdminComment 2>/dev/null | head -n 1)"
    R senergy_job_json "$name" "$(as_user senergy job "$job" --json 2>&1 | tr -d '\n')"
}

# gpu_job: rust_gpu stacked on rust_rapl over two stand-in GPUs (the tests' NVML, built on
# the host: /dev/nvidia0 and /dev/nvidia1 with no driver behind them), Slurm's cgroup/v2
# with ConstrainDevices=yes, whose eBPF device filter is the kernel's own here: a job of the
# ordinary user holding one GPU, at 200 W while the node's CPUs draw 300 W. Its script
# opens both device files (its own reaches the absent driver, the other is refused by the
# filter) and sets its GPU's power through the one the filter lets it open.
gpu_job() {
    local F=$LIB/fakegpu job on off
    install -d -m 0777 "$F"
    install -m 0755 "$P/libnvidia-ml.so.1" "$P/set_power.sh" "$F/"
    echo "0 1" >"$F/gpus"
    : >"$F/power.log"
    chmod 0666 "$F/power.log"
    for m in 0 1; do [ -e "/dev/nvidia$m" ] || mknod -m 0666 "/dev/nvidia$m" c 195 "$m"; done
    printf 'AutoDetect=off\nName=gpu File=/dev/nvidia0\nName=gpu File=/dev/nvidia1\n' >/etc/slurm/gres.conf
    sed -i -e 's|^AcctGatherEnergyType=.*|AcctGatherEnergyType=acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu|' \
        -e 's|^NodeName=sitenode1 .*|NodeName=sitenode1 CPUs=2 Gres=gpu:2 State=UNKNOWN|' /etc/slurm/slurm.conf
    echo GresTypes=gpu >>/etc/slurm/slurm.conf
    echo ConstrainDevices=yes >>/etc/slurm/cgroup.conf
    printf 'EnergyGpuNvmlLibrary=%s\nEnergyGpuAmdLibrary=none\n' "$F/libnvidia-ml.so.1" >>/etc/slurm/acct_gather.conf
    systemctl restart slurmctld
    systemctl restart slurmd
    wait_for 120 "node up with its GPUs" sh -c 'sinfo -h -n sitenode1 -o "%t %G" | grep -Eq "^idle.*gpu:2"' || return 1
    R gpu_node "$(sinfo -h -n sitenode1 -o '%t %G')"
    sim_set package0=0
    job=$(submit gpu "#!/bin/sh
#SBATCH -n1 -c1 --gres=gpu:1
for d in /dev/nvidia0 /dev/nvidia1; do echo \"\$d \$( (: <\$d) 2>&1 | sed 's/.*: //')\"; done >/home/$USER_NAME/gpu.devices
$F/set_power.sh $F self:/dev 200
while [ ! -e /home/$USER_NAME/gpu.stop ]; do :; done
$F/set_power.sh $F self:/dev 0
")
    R job gpu "$job"
    wait_for 120 "gpu running" job_running "$job" || return 1
    wait_for 60 "gpu live figure" live_ok "$job.extern" || return 1
    wait_for 30 "the job's GPU at 200 W" grep -q ' 200$' "$F/power.log" || return 1
    on=$(truth)
    sim_set package0=300
    sleep 12
    sim_set package0=0
    off=$(truth)
    R window gpu "$on" "$off"
    touch "/home/$USER_NAME/gpu.stop"
    wait_for 120 "gpu done" job_done "$job" || return 1
    R final gpu "$job" "$(final_energy "$job")" "$(job_state "$job")"
    R gpu_power_log "$(tr '\n' ';' <"$F/power.log")"
    while read -r l; do R gpu_device "$l"; done <"/home/$USER_NAME/gpu.devices"
    sacct -n -P -j "$job" -o JobID,ConsumedEnergyRaw,AllocTRES,State | while read -r line; do R sacct gpu "$line"; done
}

phase=$(cat "$STATE/phase" 2>/dev/null || echo setup)
say "phase $phase"
R phase "$phase"
R uptime "$(cut -d' ' -f1 /proc/uptime)"

case $phase in
setup)
    R pid1 "$(cat /proc/1/comm)"
    R slurm_env "$(env | grep -i '^slurm' | tr '\n' ' ')"
    R kernel "$(uname -r)"
    R cgroup_fs "$(stat -fc %T /sys/fs/cgroup)"
    R controllers "$(cat /sys/fs/cgroup/cgroup.controllers)"
    R os "$(. /etc/os-release && echo "$PRETTY_NAME")"
    R slurmd_pkg "$(dpkg-query -W -f='${Version}' slurmd)"
    R spool_before "$(stat -c '%U:%G %a' /var/lib/slurm/slurmd)"

    # the simulated RAPL hardware, as units that come back at every boot, before slurmd
    install -d "$LIB"
    install -m 0755 "$P/raplsim" "$P/bind-rapl.sh" "$LIB/"
    install -m 0644 "$P/raplsim.service" "$P/fake-rapl.service" /etc/systemd/system/
    systemctl daemon-reload
    systemctl enable raplsim.service fake-rapl.service 2>&1 | tr '\n' ' ' | sed 's/^/site-node: /' >/dev/ttyS0
    systemctl start fake-rapl.service
    R fake_rapl "$(systemctl is-active fake-rapl.service)" "$(head -c 300 /sys/class/powercap/intel-rapl:0/name 2>&1)"

    # a network interface with an address (site0.netdev says why), at every boot
    install -m 0644 "$P/site0.netdev" "$P/site0.network" /etc/systemd/network/
    systemctl enable --now systemd-networkd >/dev/null 2>&1
    wait_for 60 "site0's address" sh -c "ip -4 addr show site0 | grep -q 10.213.0.1"
    R address "$(ip -4 -o addr show site0 | awk '{print $4}')"

    # the package, with apt, its Depends resolved by apt from what the node has
    deb=$(ls "$P"/*.deb)
    R deb "$(basename "$deb")" "$(dpkg-deb -f "$deb" Depends)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y "$deb" >"$STATE/apt.log" 2>&1
    R apt_install_rc $?
    tail -n 5 "$STATE/apt.log" | while read -r l; do R apt_log "$l"; done
    R installed "$(dpkg-query -W -f='${Package} ${Version} ${Status}' slurm-energy-rust)"

    # munge: Debian's package made a key at install (or the site makes one)
    [ -s /etc/munge/munge.key ] || mungekey --create
    R munge_key "$(stat -c '%U %a' /etc/munge/munge.key)"
    systemctl restart munge

    # Debian 13's slurmdbd (24.11.5-4+deb13u1) does not start with Debian 13's current
    # libmariadb3 (1:11.8.9+ds-0+deb13u1): its first query fails ("mysql_query failed:
    # 5027 Number of columns in result (=1) set execeeds maxmimum allowed number of columns
    # (=0)") and it exits. Debian 12's Connector/C (3.3) in its place works with MariaDB
    # 11.8: where the test stages it, slurmdbd's unit is given it, as a site would until
    # Debian fixes the pair (docs/operations.md)
    if [ -e "$P/libmariadb.so.3" ]; then
        install -d "$LIB/mariadb-connector"
        install -m 0644 "$P/libmariadb.so.3" "$LIB/mariadb-connector/"
        install -d /etc/systemd/system/slurmdbd.service.d
        printf '[Service]\nEnvironment=LD_LIBRARY_PATH=%s\n' "$LIB/mariadb-connector" \
            >/etc/systemd/system/slurmdbd.service.d/mariadb-connector.conf
        systemctl daemon-reload
        R slurmdbd_connector "Debian 12's libmariadb.so.3 for Debian 13's slurmdbd"
    fi
    # MariaDB for slurmdbd, as Debian ships it (unix_socket root)
    systemctl start mariadb
    mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'site-node';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    R mariadb_user $?
    cat >/etc/slurm/slurmdbd.conf <<'EOF'
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=site-node
StorageLoc=slurm_acct_db
EOF
    # where the unit lets slurmdbd write its pid (Debian 13 runs it as slurm in /run/slurmdbd)
    rundir=$(systemctl show -p RuntimeDirectory --value slurmdbd)
    echo "PidFile=/run/${rundir:+$rundir/}slurmdbd.pid" >>/etc/slurm/slurmdbd.conf
    chown slurm:slurm /etc/slurm/slurmdbd.conf
    chmod 0600 /etc/slurm/slurmdbd.conf

    # slurm.conf: the site's own lines, then README's block as printed
    cat "$P/slurm.site.conf" "$P/slurm.readme.conf" >/etc/slurm/slurm.conf
    cp "$P/cgroup.readme.conf" /etc/slurm/cgroup.conf
    cp "$P/acct_gather.readme.conf" /etc/slurm/acct_gather.conf
    # the package's Epilog, installed as docs/senergy.md says
    install -m 0755 /usr/share/doc/slurm-energy-rust/examples/epilog.senergy /etc/slurm/epilog.senergy
    R spool "$(stat -c '%U:%G %a' /var/lib/slurm/slurmd)"

    systemctl start slurmdbd
    wait_for 90 "slurmdbd answers" sacctmgr -n list cluster || true
    sacctmgr -i add cluster site >/dev/null 2>&1
    systemctl start slurmctld
    wait_for 60 "slurmctld answers" scontrol ping || true
    # the ordinary user, with an account
    useradd -m -s /bin/bash "$USER_NAME"
    sacctmgr -i add account research >/dev/null 2>&1
    sacctmgr -i add user "$USER_NAME" account=research >/dev/null 2>&1
    R user "$(id "$USER_NAME")"
    systemctl start slurmd
    wait_for 90 "node up" node_idle || { units_report setup; journalctl -b -u slurmd -u slurmctld --no-pager | tail -n 40 >/dev/ttyS0; finish failed; }
    units_report setup
    R scontrol_energy "$(scontrol show config | grep -E '^(AcctGatherEnergyType|SlurmdSpoolDir|SlurmUser|ProctrackType|TaskPlugin|JobAcctGatherType) ' | tr -s ' ' | tr '\n' ';')"
    R slurmd_cgroup "$(sed -n 's/^0:://p' /proc/"$(systemctl show -p MainPID --value slurmd)"/cgroup)"

    # the static power, learned from the node at 100 W (raplsim's start) with no job
    wait_for 90 "static power learned" floor_learned
    R floor_before_pair "$(floor_watts)"
    R ledger_file "$(stat -c '%U:%G %a %s' "$(ledger)" 2>&1)"
    R ledger_errors "$(ledger_errors)"

    # ---- a busy and an idle job of the ordinary user sharing the node
    busy=$(submit busy "#!/bin/sh
#SBATCH -n1 -c1
srun -n1 timeout 60 sh -c 'while :; do :; done'
")
    idle=$(submit idle "#!/bin/sh
#SBATCH -n1 -c1
sleep 60
")
    R job busy "$busy"
    R job idle "$idle"
    wait_for 120 "pair running" sh -c "squeue -h -t R -o %i | grep -c . | grep -qx 2"
    wait_for 60 "busy live" live_ok "$busy.extern"
    wait_for 60 "idle live" live_ok "$idle.extern"
    R floor_at_pair "$(floor_watts)"
    sim_set package0=300
    sleep 4
    # two snapshots 12 s apart: each job's live figure with the truth read around it, then
    # the jobs' cgroup CPU time (what the model splits the dynamic part by)
    for snap in a b; do
        t_first=$(truth)
        line=""
        for j in "$busy" "$idle"; do
            before=$(truth)
            e=$(live "$j.extern")
            after=$(truth)
            line="$line $e $before $after"
        done
        R snapshot "$snap" "$t_first" "$(truth)" "$(cpu_usec "$busy")" "$(cpu_usec "$idle")" $line
        [ $snap = a ] && sleep 12
    done
    sleep 2
    sim_set package0=100
    R floor_after_pair "$(floor_watts)"
    scancel "$busy" "$idle"
    wait_for 60 "pair done" sh -c "! squeue -h | grep -q ."
    R final busy "$busy" "$(final_energy "$busy")" "$(job_state "$busy")"
    R final idle "$idle" "$(final_energy "$idle")" "$(job_state "$idle")"
    record busy "$busy"
    record idle "$idle"

    # ---- what a job's owner can do to its cgroup under v2 with controllers
    cg=$(submit cgroup "$(cat "$P/cgroup-job.sh")")
    R job cgroup "$cg"
    wait_for 120 "cgroup job done" job_done "$cg"
    while read -r l; do R cgroup_try "$l"; done <"/home/$USER_NAME/cgroup.out"

    # ---- a job alone, the Epilog's record and senergy as the user
    alone alone 12 && record alone "$last_job"
    # ---- systemctl restart slurmd in the middle of a job
    RESTART=1 alone restart 20
    R ledger_errors "$(ledger_errors)"
    journalctl -b -u slurmd --no-pager -o cat | grep -iE "error|rust_rapl" | tail -n 15 | while read -r l; do R slurmd_log "$l"; done
    # ---- a reboot: the units come back by themselves (once no job is completing: its
    # Epilog would be cut short, and slurmctld would find the node rebooted under it)
    wait_for 120 "no job completing" sh -c '[ -z "$(squeue -h -t CG)" ]'
    echo after-reboot >"$STATE/phase"
    R rebooting "$(cut -d' ' -f1 /proc/uptime)"
    sync
    systemctl --no-block reboot
    ;;
after-reboot)
    echo done >"$STATE/phase"
    R boot_id "$(cat /proc/sys/kernel/random/boot_id)"
    if ! wait_for 120 "node up after reboot" node_idle; then
        # what slurmctld says of the node (ReturnToService=0, Slurm's default, leaves a node
        # that rebooted unasked DOWN), and the admin's resume
        R node_after_reboot "$(sinfo -h -n sitenode1 -o '%t %E')"
        scontrol update nodename=sitenode1 state=resume
        R resumed_by_admin 1
        wait_for 60 "node up after resume" node_idle
    fi
    units_report reboot
    R spool_after_reboot "$(stat -c '%U:%G %a' /var/lib/slurm/slurmd)"
    R fake_rapl_after_reboot "$(head -c 100 /sys/class/powercap/intel-rapl:0/name 2>&1)"
    alone reboot 12
    R ledger_errors "$(ledger_errors)"
    # ---- a GPU job under ConstrainDevices=yes
    gpu_job
    R ledger_errors "$(ledger_errors)"
    finish ok
    ;;
*)
    finish "unexpected phase $phase"
    ;;
esac
