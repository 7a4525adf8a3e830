#!/usr/bin/env bash
# ci/cluster.sh - start/stop a private, self-contained Slurm cluster for tests.
#
#   ci/cluster.sh up DIR              start everything, block until ready, print "cluster up"
#   ci/cluster.sh down DIR            stop what this cluster started (idempotent)
#   ci/cluster.sh env DIR             print `export ...` lines for clients (eval them)
#   ci/cluster.sh restart-slurmd DIR NODE [SIGNAL [DOWN_SECS]]
#                                     restart one slurmd, keep its slurmstepds (SIGNAL: TERM,
#                                     or KILL as a crash; started again DOWN_SECS later)
#   ci/cluster.sh reconfigure DIR     scontrol reconfigure
#   ci/cluster.sh node-exec DIR NODE CMD...  run CMD in NODE's namespaces (sees NODE_HOOK mounts)
#   ci/cluster.sh wait-job DIR JOBID [SECS]  wait until sacct shows JOBID and its steps finished
#   ci/cluster.sh client DIR CMD...   run any client CMD against the cluster (SLURM_CONF, ctl netns)
#   ci/cluster.sh status DIR          show recorded processes and namespaces
#
# Everything (configs, munge key, MariaDB datadir, spool/state, logs, pid
# records, client wrappers) lives under DIR.  Nothing under /etc is touched and
# no system service is used; daemons get their own sockets, pid files and free
# TCP ports, so this coexists with a system Slurm/munge/MariaDB and with other
# clusters started from other DIRs.
#
# Environment read by `up` (all optional):
#   NODES=1                 number of slurmd nodes n1..nN
#   NETNS=auto              auto: NODES=1 -> host loopback, NODES>1 -> network
#                           namespaces; 1 forces namespaces even for one node
#   ENERGY_TYPE=acct_gather_energy/none     AcctGatherEnergyType
#   EXTRA_PLUGIN_DIR=       appended to PluginDir (colon list)
#   NODE_FREQ=5             AcctGatherNodeFreq
#   JOBACCT_FREQ=5          JobAcctGatherFrequency=task=N,energy=N
#   ACCT_GATHER_CONF=       file copied to DIR/etc/acct_gather.conf
#   NODE_HOOK=              executable run as `NODE_HOOK IDX NAME DIR` inside each
#                           slurmd's private mount namespace right before slurmd
#   SLURM_PREFIX=           use a Slurm installed under this prefix
#   SLURM_BIN, SLURM_SBIN, SLURM_PLUGIN_DIR   override individual locations
#   CLUSTER_NAME=           default: "t" + 8 hex digits derived from DIR
#   DAEMON_DEBUG=info       SlurmctldDebug/SlurmdDebug/slurmdbd DebugLevel
#   DEBUG_FLAGS=            e.g. Energy,Profile (DebugFlags)
#   EXTRA_SLURM_CONF=       file whose content is appended to slurm.conf
#   EXTRA_SLURMDBD_CONF=    file whose content is appended to slurmdbd.conf
#   NODE_OPTIONS=           more NodeName options for every node, e.g. Gres=gpu:2
#   NODE_HW=                every node's hardware instead of this machine's (slurmd -C),
#                           e.g. "CPUs=64 CoresPerSocket=64"; add
#                           SlurmdParameters=config_overrides to EXTRA_SLURM_CONF
#   CRED_EXPIRE=            seconds a step's credential lives (AuthInfo's cred_expire; at
#                           least 5), and so how long a requeued job waits to run again
#   GRES_CONF=              file copied to DIR/etc/gres.conf
#   CGROUP_CONF=            file copied to DIR/etc/cgroup.conf instead of the default
#   UP_TIMEOUT=60           seconds `up` waits for each readiness step
#
# Network layout.  NODES=1 (host mode): every daemon runs in the host network
# namespace; MariaDB listens on 127.0.0.1 only, munged on a unix socket, and
# the Slurm daemons on random free ports (Slurm itself binds them to all
# addresses, like any Slurm install).  NODES>1 (netns mode): a "ctl" namespace
# holds a bridge 10.201.0.1/24 plus munged/MariaDB/slurmdbd/slurmctld; node K
# gets its own namespace with a veth into that bridge (10.201.0.(10+K)).  No
# address is added to the host namespace, so clients must run inside the ctl
# namespace: `env` therefore puts DIR/bin first in PATH, which holds wrappers
# (srun, sbatch, sacct, ...) that enter it.  Namespace names are derived from
# DIR, so two clusters can coexist (same subnet, but separate namespaces).
# As on a real cluster, each node then also has its own munged (same key): a
# munged refuses to decode a credential twice (replay), and from Slurm 23.11 every
# node of a step decodes the same launch credential.  All munge sockets are at
# the one path of AuthInfo; in a node's mount namespace its own munged's socket
# directory is bind-mounted there.
#
# Process tracking.  Every daemon is started with setsid and recorded as
# "pid starttime" in DIR/run/pid/NAME (starttime guards against pid reuse).
# Each slurmd runs under cluster-lib/nodesup.py, a child subreaper: the
# slurmstepds that slurmd double-forks are re-parented to it, so stopping a
# node means stopping that supervisor's children - never matching by name.

set -euo pipefail

ORIG_PATH=$PATH
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB=$HERE/cluster-lib
SUBNET=10.201.0            # only used inside our own namespaces
CTL_IP_NETNS=$SUBNET.1
export PATH="$PATH:/usr/sbin:/sbin"   # munged, mariadbd, ip may live in sbin
PY=$(command -v /usr/bin/python3 || command -v python3 || echo python3)

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- helpers ---

# set DIR (absolute, may not exist yet) and derived names
set_dir() {
    [ -n "${1:-}" ] || usage
    DIR=$(realpath -m -- "$1")
    case "$DIR" in
    / | /tmp | /root | /home | /usr | /var | /etc) die "refusing to use $DIR as cluster directory" ;;
    esac
    local h
    h=$(printf %s "$DIR" | sha1sum | cut -c1-8)
    NS_PREFIX=slc$h              # netns names: slcXXXXXXXX-ctl, slcXXXXXXXX-n1, ...
    DEFAULT_CLUSTER=t$h
    PIDDIR=$DIR/run/pid
    CONF=$DIR/etc/slurm.conf
    SLOT=""
}

# load settings saved by `up` (ports, mode, binaries); harmless if missing
load_state() {
    NETNS_MODE=0
    NODES=${NODES:-1}
    if [ -r "$DIR/run/cluster.env" ]; then
        # shellcheck disable=SC1091
        . "$DIR/run/cluster.env"
    fi
}

# version_ge A B: release A (e.g. 24.11.5) is B (MAJOR.MINOR) or later
version_ge() {
    local a1 a2 b1 b2 rest
    IFS=. read -r a1 a2 rest <<<"$1"
    IFS=. read -r b1 b2 rest <<<"$2"
    [ $((10#$a1 * 100 + 10#$a2)) -ge $((10#$b1 * 100 + 10#$b2)) ]
}

# single-quote for `eval`
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# "<state> <starttime>" of a pid, from /proc/PID/stat (fields 3 and 22)
proc_state_start() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    echo "$1 ${20}"
}

# record NAME PID: remember a process we started
record() {
    local ss
    ss=$(proc_state_start "$2") || ss="X dead"
    echo "$2 ${ss#* }" >"$PIDDIR/$1"
}

# rec_pid NAME: print pid if the recorded process is still the same and alive
rec_pid() {
    local f=$PIDDIR/$1 pid st ss
    [ -r "$f" ] || return 1
    read -r pid st <"$f" || return 1
    ss=$(proc_state_start "$pid") || return 1
    [ "${ss%% *}" != Z ] && [ "${ss#* }" = "$st" ] || return 1
    echo "$pid"
}

# Environment for daemons: drop SLURM_* variables of the caller (tests may
# themselves run inside a Slurm job, and SLURM_SBIN etc. are ours), keep the
# rest (PATH, RUST_LOG, ... are useful for plugins under test).
daemon_env() {
    DENV=(env)
    local v
    for v in $(compgen -e); do
        case "$v" in SLURM_*) DENV+=(-u "$v") ;; esac
    done
    DENV+=("SLURM_CONF=$CONF")
}

# start_daemon NAME CMD...: start detached (own session, stdio to log) and record
start_daemon() {
    local name=$1
    shift
    # setsid: not killed by a Ctrl-C aimed at the test; `down` stops it.
    # (A background child of a non-interactive shell is no process-group
    # leader, so setsid does not fork and $! stays the daemon's pid.)
    # (the saved copies of our stdout/stderr must not leak into daemons, or a
    # caller reading our output until EOF would hang)
    setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 {SAVED_OUT}>&- {SAVED_ERR}>&- &
    LAST_PID=$!
    record "$name" "$LAST_PID"
}

# signal a recorded process (only if it is still the one we started).  Daemons
# were started with setsid, so their process group holds exactly them and
# their helpers (slurmctld's slurmscriptd, install-db's bootstrap mariadbd):
# signal the group.  Node supervisors get the signal alone, they orchestrate
# the shutdown of their node themselves.
signal_rec() {
    local sig=$1 name=$2 pid s
    pid=$(rec_pid "$name") || return 1
    s=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s # $1 state, $2 ppid, $3 pgrp
    if [ "$3" = "$pid" ] && [[ "$name" != nodesup-* ]]; then
        kill "-$sig" -- "-$pid" 2>/dev/null || true
    else
        kill "-$sig" "$pid" 2>/dev/null || true
    fi
}

# stop_recs TIMEOUT NAME...: TERM the given records, KILL whatever is left
# after TIMEOUT seconds, wait until they are gone.
stop_recs() {
    local timeout=$1 n left i
    shift
    for n in "$@"; do signal_rec TERM "$n" || true; done
    for ((i = 0; i < timeout * 10; i++)); do
        left=0
        for n in "$@"; do rec_pid "$n" >/dev/null && left=1; done
        [ $left = 0 ] && return 0
        sleep 0.1
    done
    for n in "$@"; do
        if rec_pid "$n" >/dev/null; then
            log "$n did not stop after ${timeout}s, sending SIGKILL"
            signal_rec KILL "$n" || true
            KILLED_HARD=1
        fi
    done
    for ((i = 0; i < 50; i++)); do
        left=0
        for n in "$@"; do rec_pid "$n" >/dev/null && left=1; done
        [ $left = 0 ] && return 0
        sleep 0.1
    done
    return 0
}

# ns prefix for commands that must run in the ctl / node network namespace
ctl_ns() {
    if [ "$NETNS_MODE" = 1 ]; then
        CTL=(nsenter "--net=/run/netns/$NS_PREFIX-ctl" --)
    else
        CTL=()
    fi
}
node_ns() {
    if [ "$NETNS_MODE" = 1 ]; then
        NODE=(nsenter "--net=/run/netns/$NS_PREFIX-n$1" --)
    else
        NODE=()
    fi
}

# client command through our wrappers (they pick the namespace and SLURM_CONF);
# bounded in time so a hung daemon cannot stall the polling loops
client() {
    local c=$1
    shift
    SLURM_CONF="$CONF" timeout 30 "$DIR/bin/$c" "$@"
}

tail_logs() {
    local f
    for f in "$@"; do
        [ -s "$f" ] || continue
        echo "----- tail $f -----" >&2
        tail -n 40 "$f" >&2
    done
}

# logs relevant to a record name
logs_of() {
    case "$1" in
    nodesup-*)
        local n=${1#nodesup-}
        echo "$DIR/log/hook-$n.log $DIR/log/slurmd-$n.out $DIR/log/slurmd-$n.log $DIR/log/nodesup-$n.out"
        ;;
    mariadbd) echo "$DIR/log/mariadbd.log $DIR/log/mariadbd.out" ;;
    installdb) echo "$DIR/log/installdb.out" ;;
    *) echo "$DIR/log/$1.out $DIR/log/$1.log" ;;
    esac
}

# fail MSG [RECORD...]: print message and the logs of the given records
fail() {
    local msg=$1 r
    shift
    log "up failed: $msg"
    for r in "$@"; do
        # shellcheck disable=SC2046
        tail_logs $(logs_of "$r")
    done
    exit 1
}

# wait_for DESC WATCH CMD...: poll CMD until it succeeds (UP_TIMEOUT), failing
# early when a process in WATCH (space separated record names) died or a
# slurmd exited (its supervisor writes DIR/run/slurmd-NODE.exit).
wait_for() {
    local desc=$1 watch=$2 deadline r f
    shift 2
    deadline=$((SECONDS + UP_TIMEOUT))
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        for r in $watch; do
            rec_pid "$r" >/dev/null || fail "$r died while waiting for $desc" "$r"
        done
        for f in "$DIR"/run/slurmd-*.exit; do
            [ -e "$f" ] || continue
            r=${f##*/slurmd-}
            r=${r%.exit}
            fail "slurmd on $r $(cat "$f") while waiting for $desc" "nodesup-$r"
        done
        [ $SECONDS -lt $deadline ] || fail "timeout (${UP_TIMEOUT}s) waiting for $desc" $watch
        sleep 0.2
    done
}

# ------------------------------------------------------------------ slots ---
# Test clusters run side by side on one host. Each claims a slot, a number K in
# 1..SLOT_COUNT, by creating SLOTS_DIR/K (mkdir is atomic); the slot gives it a job-id
# range (FirstJobId=K*JOBS_PER_SLOT+1, so Slurm's cgroups, named by job id, never meet)
# and four TCP ports (of five reserved per slot) below the kernel's ephemeral range (so
# no port picked by bind(0) elsewhere can take one). `down` frees the slot; a slot whose
# cluster directory is gone (a test killed before its `down`) is taken over.
SLOTS_DIR=${CLUSTER_SLOTS_DIR:-/tmp/slurm-test-cluster-slots}
SLOT_COUNT=800
JOBS_PER_SLOT=10000
PORT_BASE=20000

# slot_ports K: the ports of slot K (slurmctld slurmd slurmdbd mariadb)
slot_ports() {
    local base=$((PORT_BASE + $1 * 5))
    echo "$base $((base + 1)) $((base + 2)) $((base + 3))"
}

# all of slot K's ports free on loopback (something else on the host may hold one)
slot_ports_free() {
    "$PY" -c '
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", int(p)))
    except OSError:
        sys.exit(1)
    finally:
        s.close()' $(slot_ports "$1")
}

# claim_slot: set SLOT to a slot this cluster now holds (`up` first takes down what an
# earlier `up` of the same DIR left, its slot included)
claim_slot() {
    local i k owner
    mkdir -p "$SLOTS_DIR"
    # start at a slot derived from DIR, so that parallel clusters rarely race for one
    local start=$((0x$(printf %s "$DIR" | sha1sum | cut -c1-6) % SLOT_COUNT))
    for ((i = 0; i < SLOT_COUNT; i++)); do
        k=$(((start + i) % SLOT_COUNT + 1))
        if ! mkdir "$SLOTS_DIR/$k" 2>/dev/null; then
            owner=$(cat "$SLOTS_DIR/$k/dir" 2>/dev/null) || continue # being claimed now
            [ -e "$owner/.slurm-test-cluster" ] && continue
            # its cluster is gone: take the slot over (one claimer wins the rename)
            mv "$SLOTS_DIR/$k" "$SLOTS_DIR/$k.stale.$$" 2>/dev/null || continue
            rm -rf "$SLOTS_DIR/$k.stale.$$"
            mkdir "$SLOTS_DIR/$k" 2>/dev/null || continue
        fi
        echo "$DIR" >"$SLOTS_DIR/$k/dir"
        if slot_ports_free "$k"; then
            SLOT=$k
            return 0
        fi
        rm -rf "${SLOTS_DIR:?}/$k"
    done
    die "no free cluster slot in $SLOTS_DIR (all $SLOT_COUNT taken or their ports in use)"
}

# free_slot: give this cluster's slot back
free_slot() {
    [ -n "${SLOT:-}" ] || return 0
    [ "$(cat "$SLOTS_DIR/$SLOT/dir" 2>/dev/null)" = "$DIR" ] && rm -rf "${SLOTS_DIR:?}/$SLOT"
    return 0
}

# ------------------------------------------------------------------- up ----

# up_settings: the settings from the environment, and the programs they name. Part of `up`: it sets cmd_up's locals.
up_settings() {
    NODES=${NODES:-1}
    [[ "$NODES" =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "NODES must be 1..200"
    case "${NETNS:-auto}" in
    auto) if [ "$NODES" -gt 1 ]; then NETNS_MODE=1; else NETNS_MODE=0; fi ;;
    1 | yes | true) NETNS_MODE=1 ;;
    0 | no | false) [ "$NODES" -eq 1 ] || die "NODES>1 needs network namespaces"; NETNS_MODE=0 ;;
    *) die "NETNS must be auto, 0 or 1" ;;
    esac
    energy_type=${ENERGY_TYPE:-acct_gather_energy/none}
    node_freq=${NODE_FREQ:-5} jobacct_freq=${JOBACCT_FREQ:-5}
    cluster=${CLUSTER_NAME:-$DEFAULT_CLUSTER}
    dbg=${DAEMON_DEBUG:-info}
    UP_TIMEOUT=${UP_TIMEOUT:-60}
    if [ -n "${SLURM_PREFIX:-}" ]; then
        SLURM_BIN=${SLURM_BIN:-$SLURM_PREFIX/bin}
        SLURM_SBIN=${SLURM_SBIN:-$SLURM_PREFIX/sbin}
        SLURM_PLUGIN_DIR=${SLURM_PLUGIN_DIR:-$SLURM_PREFIX/lib/slurm}
    else
        SLURM_BIN=${SLURM_BIN:-/usr/bin}
        SLURM_SBIN=${SLURM_SBIN:-/usr/sbin}
        SLURM_PLUGIN_DIR=${SLURM_PLUGIN_DIR:-/usr/lib/$(sh "$HERE/multiarch.sh")/slurm-wlm}
    fi
    plugin_dir=$SLURM_PLUGIN_DIR${EXTRA_PLUGIN_DIR:+:$EXTRA_PLUGIN_DIR}
    hook=${NODE_HOOK:-}
    if [ -n "$hook" ]; then
        # absolute, because slurmd's supervisor does not run in the caller's cwd
        case "$hook" in */*) hook=$(realpath -- "$hook") ;; esac
        [ -x "$hook" ] || command -v "$hook" >/dev/null || die "NODE_HOOK $hook is not executable"
    fi
    if [ -n "${ACCT_GATHER_CONF:-}" ]; then
        [ -r "$ACCT_GATHER_CONF" ] || die "ACCT_GATHER_CONF $ACCT_GATHER_CONF is not readable"
    fi
    if [ -n "${EXTRA_SLURM_CONF:-}" ]; then
        [ -r "$EXTRA_SLURM_CONF" ] || die "EXTRA_SLURM_CONF $EXTRA_SLURM_CONF is not readable"
    fi

    for b in "$SLURM_SBIN/slurmctld" "$SLURM_SBIN/slurmd" "$SLURM_SBIN/slurmdbd" \
        "$SLURM_BIN/sinfo" "$SLURM_BIN/scontrol" "$SLURM_BIN/sacctmgr"; do
        [ -x "$b" ] || die "missing $b"
    done
    [ -d "$SLURM_PLUGIN_DIR" ] || die "missing plugin dir $SLURM_PLUGIN_DIR"
    for b in munged mariadbd mariadb-install-db mariadb-admin setsid unshare nsenter python3; do
        command -v "$b" >/dev/null || die "missing command $b"
    done
    [ "$NETNS_MODE" = 0 ] || command -v ip >/dev/null || die "missing command ip (iproute2)"
    [ "$(id -u)" = 0 ] || die "must run as root (namespaces, SlurmUser=root)"

    # Unix socket paths are limited to 108 bytes; slurmd's step sockets
    # (DIR/spool/nK/nK_<jobid>.<stepid>) are the longest ones we create.
    [ ${#DIR} -le 70 ] || die "DIR path too long (${#DIR} > 70 chars): unix sockets under it would not fit"
}

# up_layout: a fresh directory layout (only our own subdirectories are removed). Part of `up`: it sets cmd_up's locals.
up_layout() {
    mkdir -p "$DIR"
    touch "$DIR/.slurm-test-cluster"
    rm -rf "${DIR:?}"/{etc,run,state,spool,db,bin,log}
    mkdir -p "$DIR"/{etc,run/pid,state,spool,db,bin,log}
    for ((k = 1; k <= NODES; k++)); do mkdir -p "$DIR/spool/n$k"; done
    mkdir -p "$DIR/run/munge"
    if [ "$NODES" -gt 1 ]; then
        for ((k = 1; k <= NODES; k++)); do mkdir -p "$DIR/run/munge-n$k"; done
    fi
    # munged warns about sockets in directories others cannot enter
    chmod 755 "$DIR/run" "$DIR"/run/munge*
}

# up_identity: the slot (ports, job ids), the nodes' hardware and release, saved for the other subcommands. Part of `up`: it sets cmd_up's locals.
up_identity() {
    claim_slot
    read -r ctld_port slurmd_port dbd_port db_port <<<"$(slot_ports "$SLOT")"
    first_job_id=$((SLOT * JOBS_PER_SLOT + 1))
    if [ "$NETNS_MODE" = 1 ]; then ctl_ip=$CTL_IP_NETNS; else ctl_ip=127.0.0.1; fi

    # Hardware description of a node = this machine (every node runs here).
    hw=${NODE_HW:-$(SLURM_CONF=/nonexistent "$SLURM_SBIN/slurmd" -C | head -n1 | sed 's/^NodeName=[^ ]* //')}
    [ -n "$hw" ] || die "slurmd -C printed nothing"
    # the release ("slurm 24.11.5", "slurm-wlm 22.05.8"), for settings that differ
    slurm_version=$("$SLURM_SBIN/slurmd" -V 2>/dev/null | awk '{ print $2 }')
    [[ "$slurm_version" =~ ^[0-9]+\.[0-9]+ ]] || die "cannot tell the release of $SLURM_SBIN/slurmd (-V: $slurm_version)"

    # ---- saved state for the other subcommands
    {
        printf 'NODES=%q\nNETNS_MODE=%q\nSLURM_BIN=%q\nSLURM_SBIN=%q\nCLUSTER=%q\n' \
            "$NODES" "$NETNS_MODE" "$SLURM_BIN" "$SLURM_SBIN" "$cluster"
        printf 'CTLD_PORT=%q\nSLURMD_PORT=%q\nDBD_PORT=%q\nDB_PORT=%q\nSLOT=%q\n' \
            "$ctld_port" "$slurmd_port" "$dbd_port" "$db_port" "$SLOT"
    } >"$DIR/run/cluster.env"
}

# write_configs: slurm.conf, slurmdbd.conf and the files beside them. Part of `up`: it sets cmd_up's locals.
write_configs() {
    sock=$DIR/run/munge/munge.sock
    dd if=/dev/urandom of="$DIR/etc/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/etc/munge.key"
    : >"$DIR/etc/plugstack.conf"
    if [ -n "${ACCT_GATHER_CONF:-}" ]; then
        cat -- "$ACCT_GATHER_CONF" >"$DIR/etc/acct_gather.conf"
    fi
    # Nothing here uses cgroups (proctrack/linuxproc, task/none, jobacct_gather/linux),
    # but slurmd loads a cgroup plugin anyway (CgroupPlugin=autodetect), and fails where
    # the one for this machine's cgroup version was not built (cgroup/v2 needs dbus).
    # 24.05 and later can be told not to; 22.05 has no such value.
    if [ -n "${CGROUP_CONF:-}" ]; then
        cat -- "$CGROUP_CONF" >"$DIR/etc/cgroup.conf"
    elif version_ge "$slurm_version" 24.05; then
        echo "CgroupPlugin=disabled" >"$DIR/etc/cgroup.conf"
    fi
    if [ -n "${GRES_CONF:-}" ]; then
        cat -- "$GRES_CONF" >"$DIR/etc/gres.conf"
    fi

    {
        cat <<EOF
# generated by ci/cluster.sh - private test cluster, do not edit
ClusterName=$cluster
# "localhost" is replaced by Slurm with this machine's hostname, which makes
# the host/controller check pass; the address in parentheses is what is used.
SlurmctldHost=localhost($ctl_ip)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
# job ids of this cluster's own range: Slurm's cgroups (.../slurm/uid_0/job_<id>) and
# anything else named by job id never meet another test cluster's on this host
FirstJobId=$first_job_id
MaxJobId=$((first_job_id + JOBS_PER_SLOT - 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock${CRED_EXPIRE:+,cred_expire=$CRED_EXPIRE}
PluginDir=$plugin_dir
PlugStackConfig=$DIR/etc/plugstack.conf
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=$jobacct_freq,energy=$jobacct_freq
AcctGatherEnergyType=$energy_type
AcctGatherNodeFreq=$node_freq
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$ctl_ip
AccountingStoragePort=$dbd_port
# clients (sacct, sacctmgr) authenticate to slurmdbd through this munge socket
AccountingStoragePass=$sock
JobCompType=jobcomp/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=$dbg
SlurmdDebug=$dbg
${DEBUG_FLAGS:+DebugFlags=$DEBUG_FLAGS}
MailProg=/bin/true
# fast turnaround for tests
ReturnToService=2
KillWait=2
MinJobAge=10
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
EOF
        for ((k = 1; k <= NODES; k++)); do
            if [ "$NETNS_MODE" = 1 ]; then nodeaddr=$SUBNET.$((10 + k)); else nodeaddr=127.0.0.1; fi
            echo "NodeName=n$k NodeAddr=$nodeaddr NodeHostname=n$k $hw ${NODE_OPTIONS:-}State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
        if [ -n "${EXTRA_SLURM_CONF:-}" ]; then
            echo "# ---- from $EXTRA_SLURM_CONF"
            cat -- "$EXTRA_SLURM_CONF"
        fi
    } >"$CONF"

    # slurmdbd reads slurmdbd.conf from SLURM_CONF's directory; must be 0600
    (
        umask 077
        cat >"$DIR/etc/slurmdbd.conf" <<EOF
# generated by ci/cluster.sh
DbdHost=localhost
DbdAddr=$ctl_ip
DbdPort=$dbd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
PluginDir=$plugin_dir
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=$dbg
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
        if [ -n "${EXTRA_SLURMDBD_CONF:-}" ]; then
            cat -- "$EXTRA_SLURMDBD_CONF" >>"$DIR/etc/slurmdbd.conf"
        fi
    )
}

# write_client_wrappers: DIR/bin: the clients, with SLURM_CONF and the ctl namespace. Part of `up`: it sets cmd_up's locals.
write_client_wrappers() {
    local c w
    for c in sacct sacctmgr salloc sattach sbatch sbcast scancel scontrol scrontab sdiag \
        sinfo sprio squeue sreport srun sshare sstat strigger sh5util sjobexitmod; do
        [ -x "$SLURM_BIN/$c" ] || continue
        w=$DIR/bin/$c
        {
            echo '#!/bin/sh'
            echo "# generated by ci/cluster.sh: run $c against the cluster in $DIR"
            echo ": \"\${SLURM_CONF:=$CONF}\"; export SLURM_CONF"
            if [ "$NETNS_MODE" = 1 ]; then
                echo "exec nsenter --net=/run/netns/$NS_PREFIX-ctl -- $(q "$SLURM_BIN/$c") \"\$@\""
            else
                echo "exec $(q "$SLURM_BIN/$c") \"\$@\""
            fi
        } >"$w"
        chmod 755 "$w"
    done
}

# start_namespaces: the network namespaces of a multi-node cluster. Part of `up`: it sets cmd_up's locals.
start_namespaces() {
    if [ "$NETNS_MODE" = 1 ]; then
        ctlns=$NS_PREFIX-ctl
        ip netns add "$ctlns"
        ip -n "$ctlns" link set lo up
        ip -n "$ctlns" link add br0 type bridge
        ip -n "$ctlns" addr add "$ctl_ip/24" dev br0
        ip -n "$ctlns" link set br0 up
        for ((k = 1; k <= NODES; k++)); do
            nodens=$NS_PREFIX-n$k
            ip netns add "$nodens"
            ip -n "$nodens" link set lo up
            # create the pair inside the namespaces directly: no host-side names
            ip -n "$ctlns" link add "v$k" type veth peer name eth0 netns "$nodens"
            ip -n "$ctlns" link set "v$k" master br0 up
            ip -n "$nodens" addr add "$SUBNET.$((10 + k))/24" dev eth0
            ip -n "$nodens" link set eth0 up
        done
    fi
    ctl_ns
    daemon_env
}

# start_munge_and_mariadb: munged(s) and MariaDB (its datadir made while munged starts). Part of `up`: it sets cmd_up's locals.
start_munge_and_mariadb() {
    start_daemon munged "${CTL[@]}" munged --foreground --force \
        --socket="$sock" --key-file="$DIR/etc/munge.key" --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/run/munged.seed"
    mungeds="munged"
    if [ "$NODES" -gt 1 ]; then
        # one per node (see "Network layout" above); node-start.sh mounts its socket
        for ((k = 1; k <= NODES; k++)); do
            start_daemon "munged-n$k" munged --foreground --force \
                --socket="$DIR/run/munge-n$k/munge.sock" --key-file="$DIR/etc/munge.key" \
                --pid-file="$DIR/run/munged-n$k.pid" --log-file="$DIR/log/munged-n$k.log" \
                --seed-file="$DIR/run/munged-n$k.seed"
            mungeds="$mungeds munged-n$k"
        done
    fi
    # --no-defaults: ignore /etc/mysql; small log file keeps DIR small and fast
    # --tmpdir: its own, as clusters run side by side (two bootstraps sharing /tmp's
    # temporary tables fail: "Unknown table 'mysql.tmp_user_sys'")
    mkdir -p "$DIR/run/mariadb-tmp"
    mdb_opts=(--no-defaults "--datadir=$DIR/db" --user=root "--tmpdir=$DIR/run/mariadb-tmp"
        --innodb-log-file-size=8M --innodb-buffer-pool-size=64M)
    start_daemon installdb mariadb-install-db "${mdb_opts[@]}" \
        --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve
    installdb_pid=$LAST_PID

    wait_for "munged" "munged" test -S "$sock"
    for ((k = 1; k <= NODES && NODES > 1; k++)); do
        wait_for "munged of n$k" "munged-n$k" test -S "$DIR/run/munge-n$k/munge.sock"
    done
    wait "$installdb_pid" || fail "mariadb-install-db failed" installdb
    # --skip-grant-tables: no users/passwords needed; 127.0.0.1 only
    start_daemon mariadbd "${CTL[@]}" mariadbd "${mdb_opts[@]}" \
        --skip-grant-tables --skip-name-resolve --bind-address=127.0.0.1 --port="$db_port" \
        --socket="$DIR/run/mariadb.sock" --pid-file="$DIR/run/mariadbd.pid" \
        --log-error="$DIR/log/mariadbd.log" --skip-log-bin \
        --innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0
    wait_for "mariadbd" "mariadbd" mariadb-admin --no-defaults --socket="$DIR/run/mariadb.sock" ping
}

# start_slurmdbd: slurmdbd, and the cluster registered before slurmctld starts. Part of `up`: it sets cmd_up's locals.
start_slurmdbd() {
    start_daemon slurmdbd "${DENV[@]}" "${CTL[@]}" "$SLURM_SBIN/slurmdbd" -D
    wait_for "slurmdbd" "slurmdbd mariadbd munged" client sacctmgr -n -P list cluster
    # register the cluster before slurmctld starts, so its first connection
    # to slurmdbd already finds it (and sacct works right away)
    client sacctmgr -i add cluster "$cluster" >"$DIR/log/sacctmgr-add.out" 2>&1 ||
        fail "sacctmgr add cluster failed: $(cat "$DIR/log/sacctmgr-add.out")" slurmdbd
}

# start_slurm: slurmctld and the nodes (slurmds retry until slurmctld answers), until all are idle. Part of `up`: it sets cmd_up's locals.
start_slurm() {
    start_daemon slurmctld "${DENV[@]}" "${CTL[@]}" "$SLURM_SBIN/slurmctld" -D
    watch="slurmctld slurmdbd mariadbd $mungeds"
    for ((k = 1; k <= NODES; k++)); do
        node_ns "$k"
        start_daemon "nodesup-n$k" "${DENV[@]}" "NODE_HOOK=$hook" \
            "$PY" "$LIB/nodesup.py" "$PIDDIR/slurmd-n$k" "$DIR/run/slurmd-n$k.exit" \
            "$DIR/log/slurmd-n$k.out" -- \
            "${NODE[@]}" unshare --mount --uts --propagation private -- \
            sh "$LIB/node-start.sh" "$k" "n$k" "$DIR" "$SLURM_SBIN/slurmd" -D -N "n$k"
        watch="$watch nodesup-n$k"
    done
    wait_for "slurmctld" "$watch" client scontrol ping
    wait_for "$NODES node(s) idle" "$watch" nodes_idle "$NODES"

    UP_OK=1
    trap - EXIT INT TERM
    echo "cluster up ($NODES node(s), cluster $cluster, $((SECONDS - t0))s, DIR $DIR)" >&2
    echo "cluster up"
}

cmd_up() {
    set_dir "$1"
    if [ -d "$DIR" ] && [ -n "$(ls -A "$DIR")" ] && [ ! -e "$DIR/.slurm-test-cluster" ]; then
        die "$DIR is not empty and was not created by cluster.sh; refusing to use it"
    fi
    if [ -d "$PIDDIR" ]; then
        local f
        for f in "$PIDDIR"/*; do
            [ -e "$f" ] || continue
            rec_pid "${f##*/}" >/dev/null && die "a cluster is already running in $DIR (run: $0 down $DIR)"
        done
    fi
    # leftovers of an earlier run that was not taken down (e.g. namespaces, its slot)
    (DOWN_QUIET=1 load_state && do_down)

    # shared by the steps below (bash locals are seen by the functions cmd_up calls)
    local energy_type node_freq jobacct_freq cluster dbg plugin_dir hook b k ctld_port slurmd_port \
        dbd_port db_port ctl_ip first_job_id hw slurm_version sock nodeaddr t0 ctlns nodens mungeds \
        mdb_opts installdb_pid watch
    up_settings
    up_layout
    up_identity
    write_configs
    write_client_wrappers
    # ---- from here on, any failure or interruption tears down what we started
    UP_OK=0
    # The trap may fire while a command with redirected output runs (e.g. a
    # client call writing to a log file): restore the original stdout/stderr
    # saved here so the teardown messages reach the caller.
    exec {SAVED_OUT}>&1 {SAVED_ERR}>&2
    trap 'rc=$?; exec 1>&$SAVED_OUT 2>&$SAVED_ERR; if [ "$UP_OK" != 1 ]; then log "tearing down after failed up"; do_down >&2 || true; fi; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    t0=$SECONDS

    start_namespaces
    start_munge_and_mariadb
    start_slurmdbd
    start_slurm
}

# all N nodes known to slurmctld are idle (a node in several partitions is listed once per
# partition)
nodes_idle() {
    local out
    out=$(client sinfo -h -N -o '%N %T') || return 1
    [ "$(sort -u <<<"$out" | grep -c ' idle$')" -eq "$1" ]
}

# ----------------------------------------------------------------- down ----

cmd_down() {
    set_dir "$1"
    load_state
    do_down
}

# Kill processes that are in one of this cluster's node mount namespaces and
# started after the node's supervisor did: only needed when a supervisor itself
# was killed hard and its slurmstepds got re-parented elsewhere.
sweep_mntns() {
    [ -s "$DIR/run/mntns" ] || return 0
    local since="" f pid st p ns ss
    for f in "$PIDDIR"/nodesup-*; do
        [ -r "$f" ] || continue
        read -r pid st <"$f" || continue
        [ "$st" != dead ] || continue
        if [ -z "$since" ] || [ "$st" -lt "$since" ]; then since=$st; fi
    done
    [ -n "$since" ] || return 0
    for p in /proc/[0-9]*; do
        ns=$(readlink "$p/ns/mnt" 2>/dev/null) || continue
        grep -qxF "$ns" "$DIR/run/mntns" || continue
        ss=$(proc_state_start "${p#/proc/}") || continue
        [ "${ss#* }" -ge "$since" ] || continue
        log "killing leftover pid ${p#/proc/} ($(cat "$p/comm" 2>/dev/null)) of a node namespace"
        kill -KILL "${p#/proc/}" 2>/dev/null || true
    done
    return 0
}

do_down() {
    local f names=() n
    KILLED_HARD=0
    if [ -d "$PIDDIR" ]; then
        # 1. nodes: each supervisor stops slurmd, then its slurmstepds/tasks
        for f in "$PIDDIR"/nodesup-*; do
            [ -e "$f" ] || continue
            rec_pid "${f##*/}" >/dev/null || KILLED_HARD=1 # died before: sweep below
            names+=("${f##*/}")
        done
        if [ ${#names[@]} -gt 0 ]; then
            stop_recs 15 "${names[@]}"
            [ "$KILLED_HARD" = 0 ] || sweep_mntns
        fi
        # a slurmd whose supervisor vanished (only possible after a SIGKILL)
        for f in "$PIDDIR"/slurmd-*; do
            [ -e "$f" ] || continue
            signal_rec KILL "${f##*/}" && log "killed orphaned ${f##*/}"
        done
        # 2. the rest (slurmctld first in the list, it is the heaviest user of the others)
        names=()
        for n in slurmctld slurmdbd mariadbd installdb munged; do
            [ -e "$PIDDIR/$n" ] && names+=("$n")
        done
        for f in "$PIDDIR"/munged-*; do
            [ -e "$f" ] && names+=("${f##*/}")
        done
        [ ${#names[@]} -eq 0 ] || stop_recs 10 "${names[@]}"
    fi
    # 3. our network namespaces: everything still inside them is ours
    if command -v ip >/dev/null; then
        local ns pids
        for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX-" || true); do
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            if [ -n "$pids" ]; then
                log "killing leftover processes in netns $ns: $pids"
                # shellcheck disable=SC2086
                kill -KILL $pids 2>/dev/null || true
            fi
            ip netns del "$ns" 2>/dev/null || log "could not delete netns $ns"
        done
    fi
    if [ -d "$PIDDIR" ]; then
        rm -f "$PIDDIR"/* "$DIR"/run/slurmd-*.exit
    fi
    free_slot
    [ "${DOWN_QUIET:-0}" = 1 ] || echo "cluster down"
}

# ------------------------------------------------------------ the others ---

cmd_env() {
    set_dir "$1"
    load_state
    local p=":$ORIG_PATH:"
    p=${p//:$DIR\/bin:/:}  # idempotent when eval'ed repeatedly
    p=${p#:}
    p=${p%:}
    echo "export SLURM_CONF=$(q "$CONF")"
    # wrappers: right client binaries, and the ctl network namespace if any
    echo "export PATH=$(q "$DIR/bin:$p")"
}

# cmd_client DIR CMD...: a client program that is no wrapper in DIR/bin (e.g. senergy)
cmd_client() {
    set_dir "$1"
    shift
    [ $# -ge 1 ] || usage
    load_state
    if [ "$NETNS_MODE" = 1 ]; then
        exec nsenter "--net=/run/netns/$NS_PREFIX-ctl" -- env SLURM_CONF="$CONF" "$@"
    fi
    exec env SLURM_CONF="$CONF" "$@"
}

cmd_reconfigure() {
    set_dir "$1"
    load_state
    client scontrol reconfigure
}

# node_state NODE: "State SlurmdStartTime(epoch)" of a node
node_state() {
    SLURM_TIME_FORMAT=%s client scontrol -o show node "$1" 2>/dev/null |
        sed -n 's/.* State=\([^ ]*\) .*SlurmdStartTime=\([^ ]*\).*/\1 \2/p'
}

cmd_restart_slurmd() {
    set_dir "$1"
    local node=${2:-}
    [ -n "$node" ] || usage
    load_state
    UP_TIMEOUT=${UP_TIMEOUT:-60}
    local sup old new t0 st
    sup=$(rec_pid "nodesup-$node") || die "no running supervisor for node $node in $DIR"
    old=$(rec_pid "slurmd-$node" || echo none)
    # "responding again" is judged by SlurmdStartTime >= t0 (1 s resolution):
    # make sure t0 is strictly later than the current slurmd's start time
    st=$(node_state "$node")
    while [ "$(date +%s)" -le "${st#* }" ] 2>/dev/null; do sleep 0.1; done
    t0=$(date +%s)
    rm -f "$DIR/run/slurmd-$node.exit"
    # the supervisor signals slurmd only (slurmstepds are left alone) and starts
    # it again through node-start.sh: new mount namespace, NODE_HOOK again
    case "$3" in TERM | KILL) ;; *) die "signal $3: TERM or KILL" ;; esac
    printf '%s %s\n' "$3" "$4" >"$PIDDIR/slurmd-$node.restart"
    kill -USR1 "$sup"
    local deadline=$((SECONDS + UP_TIMEOUT + ${4%.*}))
    while :; do
        if [ -e "$DIR/run/slurmd-$node.exit" ]; then
            log "restarted slurmd on $node $(cat "$DIR/run/slurmd-$node.exit")"
            # shellcheck disable=SC2046
            tail_logs $(logs_of "nodesup-$node")
            exit 1
        fi
        new=$(rec_pid "slurmd-$node" || echo none)
        if [ "$new" != none ] && [ "$new" != "$old" ]; then
            st=$(node_state "$node")
            # responding again: registered after the restart and not flagged
            case "${st%% *}" in
            *NOT_RESPONDING* | *DOWN* | *UNKNOWN* | "") ;;
            *) [ "${st#* }" -ge "$t0" ] 2>/dev/null && break ;;
            esac
        fi
        if [ $SECONDS -ge $deadline ]; then
            log "timeout waiting for $node to respond after restart (state: ${st:-?})"
            # shellcheck disable=SC2046
            tail_logs $(logs_of "nodesup-$node")
            exit 1
        fi
        sleep 0.2
    done
    echo "slurmd $node restarted (pid $new)"
}

cmd_node_exec() {
    set_dir "$1"
    local node=${2:-} pid
    [ -n "$node" ] && [ $# -ge 3 ] || usage
    shift 2
    pid=$(rec_pid "slurmd-$node") || die "slurmd of $node is not running"
    exec nsenter -t "$pid" --mount --uts --net -- env SLURM_CONF="$CONF" "$@"
}

# Job end records reach slurmdbd asynchronously (~0.2 s after srun returns,
# longer under load): poll until the allocation and all its steps are in a
# final state, then print them.
cmd_wait_job() {
    set_dir "$1"
    local id=$2 secs=${3:-60} out deadline
    [[ "$id" =~ ^[0-9]+$ ]] || die "wait-job: JOBID must be numeric"
    deadline=$((SECONDS + secs))
    while :; do
        if [ -z "$(client squeue -h -j "$id" 2>/dev/null)" ]; then
            out=$(client sacct -n -P -j "$id" -o JobID,State 2>/dev/null || true)
            if [ -n "$out" ] && ! grep -q -E '\|(PENDING|RUNNING|REQUEUED|RESIZING|SUSPENDED|COMPLETING|CONFIGURING|SIGNALING|STAGE_OUT)' <<<"$out"; then
                echo "$out"
                return 0
            fi
        fi
        [ $SECONDS -lt $deadline ] || die "wait-job: job $id not finished after ${secs}s: ${out:-no sacct record}"
        sleep 0.2
    done
}

cmd_status() {
    set_dir "$1"
    load_state
    local f n pid
    for f in "$PIDDIR"/*; do
        [ -e "$f" ] || continue
        n=${f##*/}
        if pid=$(rec_pid "$n"); then echo "$n: running (pid $pid)"; else echo "$n: not running"; fi
    done
    ip netns list 2>/dev/null | grep "^$NS_PREFIX-" || true
}

case "${1:-}" in
up) [ $# -eq 2 ] || usage; cmd_up "$2" ;;
down) [ $# -eq 2 ] || usage; cmd_down "$2" ;;
env) [ $# -eq 2 ] || usage; cmd_env "$2" ;;
restart-slurmd) [ $# -ge 3 ] && [ $# -le 5 ] || usage; cmd_restart_slurmd "$2" "$3" "${4:-TERM}" "${5:-0}" ;;
reconfigure) [ $# -eq 2 ] || usage; cmd_reconfigure "$2" ;;
node-exec) shift; cmd_node_exec "$@" ;;
client) shift; cmd_client "$@" ;;
status) [ $# -eq 2 ] || usage; cmd_status "$2" ;;
wait-job) [ $# -ge 3 ] && [ $# -le 4 ] || usage; cmd_wait_job "$2" "$3" "${4:-60}" ;;
*) usage ;;
esac
