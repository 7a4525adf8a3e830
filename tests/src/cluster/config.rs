//! What a cluster is ([`Settings`]: one serde type, which [`crate::cluster::ClusterSpec`]
//! fills for the tests and benchmarks and hands to `cluster up --settings FILE` as JSON,
//! and [`Settings::from_env`] fills from the environment for a human or ci/demo.sh) and the
//! files that make it so: slurm.conf, slurmdbd.conf, cgroup.conf, gres.conf,
//! acct_gather.conf and the client wrappers.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::slots::{JOBS_PER_SLOT, Slot};
use super::{Error, Layout};

/// Only used inside the cluster's own network namespaces.
pub const SUBNET: &str = "10.201.0";

/// Where the Slurm under test is installed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Install {
    pub bin: PathBuf,
    pub sbin: PathBuf,
    pub plugin_dir: PathBuf,
}

/// A cluster's description: what `cluster up` starts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    pub nodes: usize,
    /// Daemons in network namespaces of their own (always with more than one node).
    pub netns: bool,
    pub energy_type: String,
    /// AcctGatherNodeFreq.
    pub node_freq: u32,
    /// JobAcctGatherFrequency's task and energy.
    pub jobacct_freq: u32,
    pub install: Install,
    /// Plugin directories searched after the Slurm's (a colon list).
    pub extra_plugin_dir: Option<String>,
    /// Run as `HOOK IDX NAME DIR` inside each slurmd's mount namespace right before slurmd.
    pub node_hook: Option<PathBuf>,
    /// Where the nodes' simulated hardware lives, handed to the node hook as `SIM_ROOT`
    /// (tests/fakehw/node-hook.sh reads `SIM_ROOT/NAME` and `SIM_ROOT/hosts`).
    pub sim_root: Option<PathBuf>,
    /// Each slurmd sees a pure cgroup v2 host: its own subtree of this machine's unified
    /// hierarchy, in a cgroup namespace of its own, mounted at /sys/fs/cgroup
    /// (ci/cluster-lib/node-start.sh, `CGROUP2_ROOT`), for Slurm's cgroup/v2.
    #[serde(default)]
    pub cgroup_v2: bool,
    pub acct_gather_conf: Option<PathBuf>,
    pub cgroup_conf: Option<PathBuf>,
    pub gres_conf: Option<PathBuf>,
    pub extra_slurm_conf: Option<PathBuf>,
    pub extra_slurmdbd_conf: Option<PathBuf>,
    pub cluster_name: Option<String>,
    pub daemon_debug: String,
    pub debug_flags: String,
    pub node_options: String,
    pub node_hw: String,
    /// Seconds a step's credential lives (AuthInfo's `cred_expire`); `None`: Slurm's.
    pub cred_expire: Option<u32>,
    pub up_timeout_secs: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn readable(name: &str) -> Result<Option<PathBuf>, Error> {
    let Some(path) = var(name).map(PathBuf::from) else {
        return Ok(None);
    };
    fs::File::open(&path)
        .map_err(|e| Error::Usage(format!("{name} {} is not readable: {e}", path.display())))?;
    Ok(Some(path))
}

/// `name`'s number, if set.
fn number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, Error> {
    var(name)
        .map(|v| {
            v.parse()
                .map_err(|_| Error::Usage(format!("{name} {v}: a number")))
        })
        .transpose()
}

impl Install {
    /// `SLURM_BIN`, `SLURM_SBIN`, `SLURM_PLUGIN_DIR`, each else under `SLURM_PREFIX`, else
    /// Debian's.
    pub fn from_env() -> Install {
        let prefix = var("SLURM_PREFIX").map(PathBuf::from);
        let under = |sub: &str, debian: &str| {
            prefix
                .as_ref()
                .map_or_else(|| PathBuf::from(debian), |p| p.join(sub))
        };
        Install {
            bin: var("SLURM_BIN").map_or_else(|| under("bin", "/usr/bin"), PathBuf::from),
            sbin: var("SLURM_SBIN").map_or_else(|| under("sbin", "/usr/sbin"), PathBuf::from),
            plugin_dir: crate::slurm_plugin_dir(),
        }
    }
}

impl Settings {
    /// The settings from the environment variables `cluster up` documents
    /// (tests/src/bin/cluster.rs).
    pub fn from_env() -> Result<Settings, Error> {
        let nodes = number("NODES")?.unwrap_or(1);
        let netns = match var("NETNS").as_deref().unwrap_or("auto") {
            "auto" => nodes > 1,
            "1" | "yes" | "true" => true,
            "0" | "no" | "false" => false,
            _ => return Err(Error::Usage("NETNS must be auto, 0 or 1".into())),
        };
        let node_hook = match var("NODE_HOOK") {
            // absolute, because slurmd's supervisor does not run in the caller's cwd
            Some(hook) if hook.contains('/') => Some(
                fs::canonicalize(&hook)
                    .map_err(|e| Error::Usage(format!("NODE_HOOK {hook}: {e}")))?,
            ),
            Some(hook) => Some(PathBuf::from(hook)),
            None => None,
        };
        Settings {
            nodes,
            netns,
            energy_type: var("ENERGY_TYPE").unwrap_or_else(|| "acct_gather_energy/none".into()),
            node_freq: number("NODE_FREQ")?.unwrap_or(5),
            jobacct_freq: number("JOBACCT_FREQ")?.unwrap_or(5),
            install: Install::from_env(),
            extra_plugin_dir: var("EXTRA_PLUGIN_DIR"),
            node_hook,
            sim_root: var("SIM_ROOT").map(PathBuf::from),
            cgroup_v2: matches!(var("CGROUP_V2").as_deref(), Some("1" | "yes" | "true")),
            acct_gather_conf: readable("ACCT_GATHER_CONF")?,
            cgroup_conf: readable("CGROUP_CONF")?,
            gres_conf: readable("GRES_CONF")?,
            extra_slurm_conf: readable("EXTRA_SLURM_CONF")?,
            extra_slurmdbd_conf: readable("EXTRA_SLURMDBD_CONF")?,
            cluster_name: var("CLUSTER_NAME"),
            daemon_debug: var("DAEMON_DEBUG").unwrap_or_else(|| "info".into()),
            debug_flags: var("DEBUG_FLAGS").unwrap_or_default(),
            node_options: var("NODE_OPTIONS").unwrap_or_default(),
            node_hw: var("NODE_HW").unwrap_or_default(),
            cred_expire: number("CRED_EXPIRE")?,
            up_timeout_secs: number("UP_TIMEOUT")?.unwrap_or(60),
        }
        .checked()
    }

    /// The settings a JSON file holds (what [`crate::cluster::Cluster::up`] writes).
    pub fn from_file(path: &Path) -> Result<Settings, Error> {
        let text = read(path)?;
        serde_json::from_str::<Settings>(&text)
            .map_err(|e| Error::Usage(format!("settings {}: {e}", path.display())))?
            .checked()
    }

    /// These settings, when a cluster can be made of them.
    fn checked(self) -> Result<Settings, Error> {
        if !(1..=200).contains(&self.nodes) {
            return Err(Error::Usage("NODES must be 1..200".into()));
        }
        if self.nodes > 1 && !self.netns {
            return Err(Error::Usage("NODES>1 needs network namespaces".into()));
        }
        Ok(self)
    }

    /// PluginDir: the Slurm's, then the extra ones.
    pub fn plugin_dir(&self) -> String {
        let slurm = self.install.plugin_dir.display();
        match &self.extra_plugin_dir {
            Some(extra) => format!("{slurm}:{extra}"),
            None => slurm.to_string(),
        }
    }
}

/// A release (`24.11.5`) is `major.minor` or later.
pub fn version_ge(release: &str, major: u32, minor: u32) -> bool {
    let mut p = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (p.next().unwrap_or(0), p.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// What `up` learns before it writes the files: the slot, this machine's node hardware,
/// the release.
pub struct Identity {
    pub cluster: String,
    pub slot: Slot,
    pub hw: String,
    pub release: String,
}

impl Identity {
    /// The controller's address: the bridge in the ctl namespace, else loopback.
    pub fn ctl_ip(settings: &Settings) -> String {
        if settings.netns {
            format!("{SUBNET}.1")
        } else {
            "127.0.0.1".into()
        }
    }
}

/// slurm.conf.
pub fn slurm_conf(s: &Settings, id: &Identity, layout: &Layout, extra: &str) -> String {
    let dir = layout.dir.display();
    let sock = layout.munge_socket();
    let sock = sock.display();
    let ctl_ip = Identity::ctl_ip(s);
    let ports = id.slot.ports();
    let first = id.slot.first_job_id();
    let cred = s
        .cred_expire
        .map_or_else(String::new, |secs| format!(",cred_expire={secs}"));
    let debug_flags = if s.debug_flags.is_empty() {
        String::new()
    } else {
        format!("DebugFlags={}", s.debug_flags)
    };
    let (cluster, dbg, plugin_dir) = (&id.cluster, &s.daemon_debug, s.plugin_dir());
    let mut text = format!(
        "# generated by the test cluster harness (tests/src/cluster) - do not edit
ClusterName={cluster}
# \"localhost\" is replaced by Slurm with this machine's hostname, which makes
# the host/controller check pass; the address in parentheses is what is used.
SlurmctldHost=localhost({ctl_ip})
SlurmctldPort={}
SlurmdPort={}
# job ids of this cluster's own range: Slurm's cgroups (.../slurm/uid_0/job_<id>) and
# anything else named by job id never meet another test cluster's on this host
FirstJobId={first}
MaxJobId={}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}{cred}
PluginDir={plugin_dir}
PlugStackConfig={dir}/etc/plugstack.conf
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task={jf},energy={jf}
AcctGatherEnergyType={}
AcctGatherNodeFreq={}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={ctl_ip}
AccountingStoragePort={}
# clients (sacct, sacctmgr) authenticate to slurmdbd through this munge socket
AccountingStoragePass={sock}
JobCompType=jobcomp/none
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
SlurmctldDebug={dbg}
SlurmdDebug={dbg}
{debug_flags}
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
",
        ports.slurmctld,
        ports.slurmd,
        first + JOBS_PER_SLOT - 1,
        s.energy_type,
        s.node_freq,
        ports.slurmdbd,
        jf = s.jobacct_freq,
    );
    for k in 1..=s.nodes {
        let addr = if s.netns {
            format!("{SUBNET}.{}", 10 + k)
        } else {
            "127.0.0.1".into()
        };
        let _ = writeln!(
            text,
            "NodeName=n{k} NodeAddr={addr} NodeHostname=n{k} {} {}State=UNKNOWN",
            id.hw, s.node_options
        );
    }
    text.push_str("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
    if let Some(path) = &s.extra_slurm_conf {
        let _ = writeln!(text, "# ---- from {}", path.display());
        text.push_str(extra);
    }
    text
}

/// slurmdbd.conf.
pub fn slurmdbd_conf(s: &Settings, id: &Identity, layout: &Layout, extra: &str) -> String {
    let dir = layout.dir.display();
    let ports = id.slot.ports();
    format!(
        "# generated by the test cluster harness (tests/src/cluster)
DbdHost=localhost
DbdAddr={}
DbdPort={}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={}
PluginDir={}
PidFile={dir}/run/slurmdbd.pid
LogFile={dir}/log/slurmdbd.log
DebugLevel={}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={}
StorageUser=root
StorageLoc=slurm_acct_db
{extra}",
        Identity::ctl_ip(s),
        ports.slurmdbd,
        layout.munge_socket().display(),
        s.plugin_dir(),
        s.daemon_debug,
        ports.mariadb,
    )
}

/// cgroup.conf: the caller's, else none before 24.05, else `CgroupPlugin=disabled`.
/// Nothing here uses cgroups by default (proctrack/linuxproc, task/none,
/// jobacct_gather/linux), but slurmd loads a cgroup plugin anyway (autodetect), and fails
/// where the one for this machine's cgroup version was not built (cgroup/v2 needs dbus).
/// 24.05 and later can be told not to; 22.05 has no such value.
pub fn cgroup_conf(s: &Settings, release: &str) -> Result<Option<String>, Error> {
    match &s.cgroup_conf {
        Some(path) => read(path).map(Some),
        None if version_ge(release, 24, 5) => Ok(Some("CgroupPlugin=disabled\n".into())),
        None => Ok(None),
    }
}

pub fn read(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Single-quotes for sh.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The client programs `DIR/bin` wraps.
const CLIENTS: [&str; 20] = [
    "sacct",
    "sacctmgr",
    "salloc",
    "sattach",
    "sbatch",
    "sbcast",
    "scancel",
    "scontrol",
    "scrontab",
    "sdiag",
    "sinfo",
    "sprio",
    "squeue",
    "sreport",
    "srun",
    "sshare",
    "sstat",
    "strigger",
    "sh5util",
    "sjobexitmod",
];

/// `DIR/bin`: each client with SLURM_CONF and the ctl network namespace, so that a shell
/// with `DIR/bin` first in PATH (`cluster env`) reaches the cluster.
pub fn write_client_wrappers(s: &Settings, layout: &Layout) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    for c in CLIENTS {
        let program = s.install.bin.join(c);
        if !program.exists() {
            continue;
        }
        let program = sh_quote(&program.display().to_string());
        let enter = if s.netns {
            format!("nsenter --net=/run/netns/{}-ctl -- ", layout.ns_prefix)
        } else {
            String::new()
        };
        let w = layout.dir.join("bin").join(c);
        fs::write(
            &w,
            format!(
                "#!/bin/sh\n# generated by the test cluster harness: run {c} against the cluster in {}\n\
                 : \"${{SLURM_CONF:={}}}\"; export SLURM_CONF\nexec {enter}{program} \"$@\"\n",
                layout.dir.display(),
                layout.conf().display()
            ),
        )
        .map_err(|e| Error::io(&w, e))?;
        fs::set_permissions(&w, fs::Permissions::from_mode(0o755)).map_err(|e| Error::io(&w, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_compare_by_major_and_minor() {
        assert!(version_ge("24.05.1", 24, 5));
        assert!(version_ge("26.05.3", 24, 5));
        assert!(!version_ge("22.05.8", 24, 5));
        assert!(!version_ge("23.11.10", 24, 5));
    }

    #[test]
    fn quoting_survives_a_quote() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }
}
