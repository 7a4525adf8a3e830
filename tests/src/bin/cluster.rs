//! cluster - start/stop a private, self-contained Slurm cluster for tests.
//!
//! ```text
//!   cluster up DIR [--settings FILE]  start everything, block until ready, print
//!                               "cluster up"; FILE: the cluster's settings as JSON
//!   cluster down DIR            stop what this cluster started (idempotent)
//!   cluster env DIR             print `export ...` lines for clients (eval them)
//!   cluster restart-slurmd DIR NODE [SIGNAL [DOWN_SECS]]
//!                               restart one slurmd, keep its slurmstepds (SIGNAL: TERM,
//!                               or KILL as a crash; started again DOWN_SECS later)
//!   cluster reconfigure DIR     scontrol reconfigure
//!   cluster node-exec DIR NODE CMD...  run CMD in NODE's namespaces (sees NODE_HOOK mounts)
//!   cluster client DIR CMD...   run any client CMD against the cluster (SLURM_CONF, ctl netns)
//!   cluster status DIR          show recorded processes and namespaces
//!   (cluster nodesup ...        a node's supervisor, which `up` starts: cluster/nodesup.rs)
//! ```
//!
//! Everything (configs, munge key, MariaDB datadir, spool/state, logs, pid records, client
//! wrappers) lives under DIR. Nothing under /etc is touched and no system service is used;
//! daemons get their own sockets, pid files and ports (a slot's: tests/src/cluster/slots.rs),
//! so this coexists with a system Slurm/munge/MariaDB and with other clusters started from
//! other DIRs.
//!
//! A cluster is described by one type, `Settings` (tests/src/cluster/config.rs). The tests,
//! benchmarks and anything else built on `Cluster::up` (tests/src/cluster.rs) fill it from a
//! `ClusterSpec` and hand it over with `--settings FILE` (its JSON form). Without
//! `--settings`, as for a human or ci/demo.sh, `up` fills it from these environment variables
//! (all optional):
//!   NODES=1                 number of slurmd nodes n1..nN
//!   NETNS=auto              auto: NODES=1 -> host loopback, NODES>1 -> network
//!                           namespaces; 1 forces namespaces even for one node
//!   ENERGY_TYPE=acct_gather_energy/none     AcctGatherEnergyType
//!   EXTRA_PLUGIN_DIR=       appended to PluginDir (colon list)
//!   NODE_FREQ=5             AcctGatherNodeFreq
//!   JOBACCT_FREQ=5          JobAcctGatherFrequency=task=N,energy=N
//!   ACCT_GATHER_CONF=       file copied to DIR/etc/acct_gather.conf
//!   NODE_HOOK=              executable run as `NODE_HOOK IDX NAME DIR` inside each
//!                           slurmd's private mount namespace right before slurmd
//!   SIM_ROOT=               the nodes' simulated hardware, for the node hook (it gets
//!                           SIM_ROOT; tests/fakehw/node-hook.sh)
//!   CGROUP_V2=0             1: each slurmd sees a pure cgroup v2 host, its own subtree of
//!                           /sys/fs/cgroup/unified (for CgroupPlugin=cgroup/v2)
//!   SLURM_PREFIX=           use a Slurm installed under this prefix
//!   SLURM_BIN, SLURM_SBIN, SLURM_PLUGIN_DIR   override individual locations
//!   CLUSTER_NAME=           default: "t" + 8 hex digits derived from DIR
//!   DAEMON_DEBUG=info       SlurmctldDebug/SlurmdDebug/slurmdbd DebugLevel
//!   DEBUG_FLAGS=            e.g. Energy,Profile (DebugFlags)
//!   EXTRA_SLURM_CONF=       file whose content is appended to slurm.conf
//!   EXTRA_SLURMDBD_CONF=    file whose content is appended to slurmdbd.conf
//!   NODE_OPTIONS=           more NodeName options for every node, e.g. Gres=gpu:2
//!   NODE_HW=                every node's hardware instead of this machine's (slurmd -C),
//!                           e.g. "CPUs=64 CoresPerSocket=64"; add
//!                           SlurmdParameters=config_overrides to EXTRA_SLURM_CONF
//!   CRED_EXPIRE=            seconds a step's credential lives (AuthInfo's cred_expire; at
//!                           least 5), and so how long a requeued job waits to run again
//!   GRES_CONF=              file copied to DIR/etc/gres.conf
//!   CGROUP_CONF=            file copied to DIR/etc/cgroup.conf instead of the default
//!   UP_TIMEOUT=60           seconds `up` waits for each step
//!
//! Environment read whether or not `--settings` is given:
//!   UP_TIMEOUT=60           seconds restart-slurmd waits for each step
//!   CLUSTER_SLOTS_DIR=      where clusters claim their slots
//!
//! Network layout: tests/src/cluster/netns.rs. Process tracking: tests/src/cluster/procs.rs.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use energy_tests::cluster::config::Settings;
use energy_tests::cluster::{Error, Layout, nodesup, ops};

fn usage() -> ExitCode {
    let doc = include_str!("cluster.rs");
    for line in doc.lines().skip(1).take(13) {
        eprintln!("{}", line.trim_start_matches("//!").trim_start_matches(' '));
    }
    ExitCode::from(2)
}

extern "C" fn on_signal(signal: libc::c_int) {
    ops::INTERRUPTED.store(signal, Ordering::Relaxed);
}

fn up_timeout() -> Duration {
    let secs = std::env::var("UP_TIMEOUT")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

fn run(args: &[OsString], original_path: &str) -> Result<ExitCode, Error> {
    if args.first().is_some_and(|a| a == "nodesup") {
        nodesup::run(&args[1..])?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = |i: usize| args.get(i).and_then(|a| a.to_str()).unwrap_or_default();
    let Some(dir) = args.get(1) else {
        return Ok(usage());
    };
    let layout = Layout::new(Path::new(dir))?;
    match (text(0), args.len()) {
        ("up", 2 | 4) => {
            // an interrupted `up` takes down what it started, as a failed one does
            for signal in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
                unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
            }
            let settings = match (args.get(2), args.get(3)) {
                (None, None) => Settings::from_env()?,
                (Some(flag), Some(file)) if flag == "--settings" => {
                    Settings::from_file(Path::new(file))?
                }
                _ => return Ok(usage()),
            };
            ops::up(&layout.dir, &settings)?;
            println!("cluster up");
        }
        ("down", 2) => ops::down(&layout, false),
        ("env", 2) => print!("{}", ops::env_lines(&layout, original_path)),
        ("restart-slurmd", 3..=5) => {
            let signal = args.get(3).map_or("TERM", |_| text(3));
            let down: f64 = args
                .get(4)
                .map_or(Ok(0.0), |_| text(4).parse())
                .map_err(|_| Error::Usage(format!("DOWN_SECS {}: seconds", text(4))))?;
            let pid = ops::restart_slurmd(&layout, text(2), signal, down, up_timeout())?;
            println!("slurmd {} restarted (pid {pid})", text(2));
        }
        ("reconfigure", 2) => ops::reconfigure(&layout)?,
        ("node-exec", 4..) => {
            let err = ops::node_command(&layout, text(2), &args[3..])?.exec();
            return Err(Error::Setup(format!("node-exec: {err}")));
        }
        ("client", 3..) => {
            let err = ops::client_command(&layout, &args[2..])?.exec();
            return Err(Error::Setup(format!("client: {err}")));
        }
        ("status", 2) => print!("{}", ops::status(&layout)),
        _ => return Ok(usage()),
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let original_path = std::env::var("PATH").unwrap_or_default();
    // munged, mariadbd and ip may live in sbin, for the daemons as for this program
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("PATH", format!("{original_path}:/usr/sbin:/sbin")) };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&args, &original_path) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cluster: {e}");
            let signal = ops::INTERRUPTED.load(Ordering::Relaxed);
            if signal != 0 {
                // as a shell reports a command killed by the signal
                ExitCode::from(u8::try_from(128 + signal).unwrap_or(u8::MAX))
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
