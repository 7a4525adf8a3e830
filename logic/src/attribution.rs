//! Who is to be charged for what on a node: the jobs' and steps' processes ([`procs`]), their
//! cgroups and what they use there ([`cgroup`]), the devices Slurm granted them ([`grant`],
//! [`gres`], [`holders`]), and how a shared node's energy is split among them ([`model`]).
//! The node's ledger ([`crate::ledger`]) charges each job by what these observe.
//!
//! With `EnergyAttribution=shared` each job on a shared node gets its share of the node's
//! energy; a source of devices Slurm allocates (GPUs) charges each job the devices it holds,
//! in every mode.

pub(crate) mod cgroup;
pub(crate) mod grant;
pub(crate) mod gres;
pub(crate) mod holders;
pub(crate) mod job_record;
pub(crate) mod model;
pub(crate) mod owner_time;
pub(crate) mod procs;
pub(crate) mod sockets;
pub(crate) mod steps;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, KeyValues, config_keys};
use cgroup::CgroupTree;

/// The keys every plugin of the family reads beside its source's.
pub const KEYS: &[&str] = Attribution::KEYS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every step gets the node's energy.
    #[default]
    Node,
    /// Every job and step gets its share.
    Shared,
}

config_keys! {
    /// How a shared node's energy is split among its jobs (`EnergyAttribution` and its keys).
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Attribution {
        /// How the node's energy is charged to the jobs on it. `node`: each step is charged
        /// the node's whole energy while it ran, as with Slurm's own plugins (two jobs
        /// sharing a node are each charged the whole node). `shared`: slurmd splits the
        /// node's energy among its jobs, the static power (`EnergyAttributionIdleWatts`) by
        /// what each job holds (its CPUs, and its memory where every job has a memory
        /// limit), the rest by the CPU time each uses. `shared` needs Slurm's job cgroups
        /// (`ProctrackType=proctrack/cgroup` and `task/cgroup` in `TaskPlugin`): without
        /// them slurmd logs why, and every step is charged the whole node. rust_gpu charges
        /// each job the GPUs it holds in either mode. See docs/shared-nodes.md.
        pub mode: Mode = Mode::Node, {
            MODE_KEY = "EnergyAttribution": parse(|k, v| match v.to_ascii_lowercase().as_str() {
                "node" => Ok(Mode::Node),
                "shared" => Ok(Mode::Shared),
                _ => Err(ConfigError::new(k, v, "expected node or shared")),
            }),
            show(|m| match m {
                Mode::Node => "node".into(),
                Mode::Shared => "shared".into(),
            });
        }
        /// The node's static power in watts: what it draws whatever its jobs do, which
        /// `EnergyAttribution=shared` charges to the jobs by what they hold, not by what
        /// they use (unused with `node`). Not set: each node learns its own, the lowest
        /// power it held over 10 s. One acct_gather.conf usually serves every node: set it
        /// only where every node draws the same. It is the node meter's (rust_rapl,
        /// rust_ipmi, rust_redfish, rust_hwmon, rust_pm_counters, rust_variorum); rust_gpu
        /// does not read it, each GPU's is `EnergyGpuIdleWatts`.
        pub idle_watts: Option<f64> = None, {
            IDLE_KEY = "EnergyAttributionIdleWatts": parse(idle_watts), show(shown_idle_watts);
        }
    }
}

/// A static power in watts, 0 or more (`EnergyAttributionIdleWatts`, `EnergyGpuIdleWatts`).
pub(crate) fn idle_watts(key: &'static str, v: &str) -> Result<Option<f64>, ConfigError> {
    v.parse::<f64>()
        .ok()
        .filter(|w| w.is_finite() && *w >= 0.0)
        .map(Some)
        .ok_or_else(|| ConfigError::new(key, v, "expected watts, 0 or more"))
}

/// As `scontrol show config` shows a static power: `(learned)` when not set.
pub(crate) fn shown_idle_watts(w: &Option<f64>) -> String {
    w.map_or("(learned)".to_string(), |w| w.to_string())
}

/// A step of a job, as Slurm numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepId(pub u32);

impl StepId {
    /// Slurm's extern step (`SLURM_EXTERN_CONT`).
    pub const EXTERN: Self = Self(0xFFFF_FFFC);
    /// Slurm's batch step (`SLURM_BATCH_SCRIPT`).
    pub const BATCH: Self = Self(0xFFFF_FFFB);
    /// Slurm's interactive step (`SLURM_INTERACTIVE_STEP`).
    pub const INTERACTIVE: Self = Self(0xFFFF_FFFA);

    /// Its directory in the job's cgroup.
    pub fn cgroup_name(self) -> String {
        format!("step_{}", self.name())
    }

    /// As Slurm names it after the job's id (`extern`, `batch`, `interactive`, a number).
    pub fn name(self) -> String {
        match self {
            Self::EXTERN => "extern".into(),
            Self::BATCH => "batch".into(),
            Self::INTERACTIVE => "interactive".into(),
            Self(n) => n.to_string(),
        }
    }

    /// From a number or Slurm's name for it (`extern`, `batch`, `interactive`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "extern" => Some(Self::EXTERN),
            "batch" => Some(Self::BATCH),
            "interactive" => Some(Self::INTERACTIVE),
            n => n.parse().ok().map(Self),
        }
    }
}

/// A step on this node: its job and its step, as slurmd's ledger and a step's question to
/// slurmd name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepKey {
    /// The job's id.
    pub job: u32,
    /// The step's id within its job.
    pub step: StepId,
}

impl StepKey {
    /// Step `step` of job `job`.
    pub const fn new(job: u32, step: StepId) -> Self {
        Self { job, step }
    }
}

/// `J.S` as in a step's name; a heterogeneous job's component (`J.S.C`) is not split.
fn job_step(text: &str) -> Option<StepKey> {
    let (job, step) = text.split_once('.')?;
    Some(StepKey::new(job.parse().ok()?, StepId::parse(step)?))
}

/// The steps slurmd runs on this node, with their slurmstepd sockets `<node>_<job>.<step>`
/// in SlurmdSpoolDir (a spool dir per node, so other nodes' jobs on the same host are not
/// seen), in job order.
pub(crate) fn present_steps(spool: &Path) -> BTreeMap<StepKey, PathBuf> {
    fs::read_dir(spool)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((socket_step(&name)?, e.path()))
        })
        .collect()
}

/// The step whose slurmstepd's socket is named `name` (`<node>_<job>.<step>`).
pub(crate) fn socket_step(name: &str) -> Option<StepKey> {
    job_step(name.rsplit_once('_')?.1)
}

/// A slurmstepd's step, from the title it gives itself (`slurmstepd: [J.S]`, 26.05's step
/// manager `slurmstepd: [J.S stepmgr]`) as `/proc/<pid>/cmdline` shows it.
pub fn own_step(cmdline: &str) -> Option<StepKey> {
    let inside = cmdline.split_once("slurmstepd: [")?.1;
    job_step(inside.split([']', ' ']).next()?)
}

/// Where the node keeps its ledger and finds its jobs.
#[derive(Debug, Clone)]
pub struct Site {
    /// SlurmdSpoolDir, expanded for this node.
    pub spool: PathBuf,
    /// Slurm's CgroupMountpoint.
    pub cgroup_root: PathBuf,
    /// Where the processes are shown (`procs::PROC_ROOT`).
    pub proc_root: PathBuf,
}

/// Slurm's cgroup mount point (cgroup.conf's CgroupMountpoint default).
pub(crate) const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// cgroup.conf's CgroupMountpoint, or its default.
pub fn cgroup_mountpoint(cgroup_conf: &str) -> PathBuf {
    crate::config::file_value(cgroup_conf, "CgroupMountpoint")
        .map_or_else(|| PathBuf::from(CGROUP_ROOT), PathBuf::from)
}

/// SlurmdSpoolDir for `node` on this host (`%n`: the node's name, `%h`: the host's).
pub fn spool_for_node(template: &str, node: &str) -> PathBuf {
    PathBuf::from(crate::source::expand_node(template, node))
}

/// Whether slurm.conf's `ProctrackType` and `TaskPlugin` keep jobs in Slurm's cgroups,
/// where a shared node's split finds them; an error says what is missing.
pub(crate) fn job_cgroups(proctrack: &str, task_plugin: &str) -> Result<(), String> {
    let mut missing = Vec::new();
    if proctrack != "proctrack/cgroup" {
        missing.push(format!(
            "ProctrackType=proctrack/cgroup (it is {proctrack})"
        ));
    }
    if !task_plugin.split(',').any(|p| p.trim() == "task/cgroup") {
        // 26.05 leaves TaskPlugin empty for task/none
        let is = if task_plugin.trim().is_empty() {
            "none"
        } else {
            task_plugin
        };
        missing.push(format!("task/cgroup in TaskPlugin (it is {is})"));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "it needs Slurm's job cgroups: {}",
            missing.join(" and ")
        ))
    }
}

impl Site {
    /// The site from slurm.conf's values, when Slurm keeps its jobs in cgroups; an error
    /// says what is missing. `spool` is this node's SlurmdSpoolDir.
    pub fn from_conf(
        spool: PathBuf,
        proctrack: &str,
        task_plugin: &str,
        cgroup_root: &Path,
    ) -> Result<Self, String> {
        job_cgroups(proctrack, task_plugin)?;
        CgroupTree::from_path(cgroup_root).map_err(|e| e.to_string())?;
        Ok(Self {
            spool,
            cgroup_root: cgroup_root.to_path_buf(),
            proc_root: PathBuf::from(procs::PROC_ROOT),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn keys_parse_and_bad_values_name_key_and_value() {
        let mut values = KeyValues::new();
        assert_eq!(Attribution::parse(&values), Ok(Attribution::default()));
        values.set(MODE_KEY, "Shared");
        values.set(IDLE_KEY, "120.5");
        assert_eq!(
            Attribution::parse(&values),
            Ok(Attribution {
                mode: Mode::Shared,
                idle_watts: Some(120.5)
            })
        );
        values.set(MODE_KEY, "half");
        let e = Attribution::parse(&values)
            .expect_err("bad mode")
            .to_string();
        assert!(e.contains("EnergyAttribution=half"), "{e}");
        values.set(MODE_KEY, "node");
        values.set(IDLE_KEY, "-3");
        let e = Attribution::parse(&values)
            .expect_err("bad watts")
            .to_string();
        assert!(e.contains("EnergyAttributionIdleWatts=-3"), "{e}");
    }

    #[test]
    fn steps_are_named_as_slurm_names_them() {
        assert_eq!(
            own_step("slurmstepd: [1234.extern] "),
            Some(StepKey::new(1234, StepId::EXTERN))
        );
        assert_eq!(
            own_step("slurmstepd: [7.0]"),
            Some(StepKey::new(7, StepId(0)))
        );
        assert_eq!(own_step("/usr/sbin/slurmstepd"), None);
        assert_eq!(
            own_step("slurmstepd: [8.extern stepmgr]"),
            Some(StepKey::new(8, StepId::EXTERN))
        );
        assert_eq!(StepId::BATCH.cgroup_name(), "step_batch");
        assert_eq!(StepId(3).cgroup_name(), "step_3");
    }

    #[test]
    fn present_steps_are_the_sockets_in_the_spool_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let _a = UnixListener::bind(tmp.path().join("n1_12.4294967292")).expect("socket");
        let _b = UnixListener::bind(tmp.path().join("n1_12.0")).expect("socket");
        let _c = UnixListener::bind(tmp.path().join("n1_3.4294967291")).expect("socket");
        fs::write(tmp.path().join("n1_99.0"), "").expect("a plain file is no step");
        fs::create_dir(tmp.path().join("job00012")).expect("dir");
        let present = present_steps(tmp.path());
        assert_eq!(
            present.keys().copied().collect::<Vec<_>>(),
            vec![
                StepKey::new(3, StepId::BATCH),
                StepKey::new(12, StepId(0)),
                StepKey::new(12, StepId::EXTERN)
            ]
        );
        assert_eq!(
            present[&StepKey::new(12, StepId(0))],
            tmp.path().join("n1_12.0")
        );
    }

    #[test]
    fn the_site_needs_slurms_cgroups() {
        let tmp = tempfile::tempdir().expect("tempdir");
        cgroup::tests::v1_tree(tmp.path(), "slurm", 1, "0", u64::MAX, 0, &[]);
        let spool = spool_for_node("/var/spool/slurmd/%n", "n1");
        assert_eq!(spool, Path::new("/var/spool/slurmd/n1"));
        let site = Site::from_conf(
            spool,
            "proctrack/cgroup",
            "task/affinity,task/cgroup",
            tmp.path(),
        )
        .expect("site");
        assert_eq!(site.cgroup_root, tmp.path());
        let e = Site::from_conf("/s".into(), "proctrack/linuxproc", "task/none", tmp.path())
            .expect_err("no cgroups");
        assert!(
            e.contains("ProctrackType=proctrack/cgroup (it is proctrack/linuxproc)"),
            "{e}"
        );
        assert!(
            e.contains("task/cgroup in TaskPlugin (it is task/none)"),
            "{e}"
        );
    }
}
