//! `EnergyAttribution=shared`: each job on a shared node gets its share of the node's energy.
//!
//! slurmd's instance owns the node's meter; at each of its samples (at most once per
//! [`LEDGER_PERIOD`]) a [`Keeper`] reads the cgroups of the jobs slurmd runs, splits the
//! interval's energy among them ([`model`]), and publishes the cumulative joules of every
//! job and step in a root-only file under SlurmdSpoolDir ([`ledger`]). Each slurmstepd reads
//! its own figure from that file ([`StepShare`]), brought up to the moment of the call at
//! the step's last power: no RPC, no sampler of its own.

pub mod cgroup;
pub mod ledger;
pub mod model;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::accounting::Accounting;
use crate::config::{ConfigError, KeyValues};
use crate::source::{EnergyReader, Reading, stale_after};
use cgroup::CgroupTree;
use ledger::{Ledger, Observation, ObservedJob};

pub const MODE_KEY: &str = "EnergyAttribution";
pub const IDLE_KEY: &str = "EnergyAttributionIdleWatts";
/// The keys every plugin of the family reads beside its source's.
pub const KEYS: &[&str] = &[MODE_KEY, IDLE_KEY];
/// The ledger is updated at the meter's samples (every second or faster), at most this
/// often; it is a sample period (about a second) old at most.
const LEDGER_INTERVAL: Duration = Duration::from_millis(500);
/// How old the ledger may get while slurmd samples normally.
pub const LEDGER_PERIOD: Duration = Duration::from_secs(1);
/// A step reads the file at each of Slurm's calls and has no sampling thread (there is no
/// counter to wrap); its figure goes stale only when the ledger does.
const STEP_SAMPLE_PERIOD: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every step gets the node's energy.
    #[default]
    Node,
    /// Every job and step gets its share.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Attribution {
    pub mode: Mode,
    /// The node's static power; learned when absent.
    pub idle_watts: Option<f64>,
}

impl Attribution {
    pub fn parse(values: &KeyValues) -> Result<Self, ConfigError> {
        let mode = match values.get(MODE_KEY) {
            None => Mode::Node,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "node" => Mode::Node,
                "shared" => Mode::Shared,
                _ => return Err(ConfigError::new(MODE_KEY, v, "expected node or shared")),
            },
        };
        let idle_watts = values
            .get(IDLE_KEY)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|w| w.is_finite() && *w >= 0.0)
                    .ok_or_else(|| ConfigError::new(IDLE_KEY, v, "expected watts, 0 or more"))
            })
            .transpose()?;
        Ok(Self { mode, idle_watts })
    }

    pub fn show(&self) -> Vec<(&'static str, String)> {
        let mode = match self.mode {
            Mode::Node => "node",
            Mode::Shared => "shared",
        };
        let idle = self
            .idle_watts
            .map_or("(learned)".to_string(), |w| w.to_string());
        vec![(MODE_KEY, mode.to_string()), (IDLE_KEY, idle)]
    }
}

/// A step of a job, as Slurm numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepId(pub u32);

impl StepId {
    pub const EXTERN: Self = Self(0xFFFF_FFFC);
    pub const BATCH: Self = Self(0xFFFF_FFFB);
    pub const INTERACTIVE: Self = Self(0xFFFF_FFFA);

    /// Its directory in the job's cgroup.
    pub fn cgroup_name(self) -> String {
        match self {
            Self::EXTERN => "step_extern".into(),
            Self::BATCH => "step_batch".into(),
            Self::INTERACTIVE => "step_interactive".into(),
            Self(n) => format!("step_{n}"),
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

/// `J.S` as in a step's name; a heterogeneous job's component (`J.S.C`) is not split.
fn job_step(text: &str) -> Option<(u32, StepId)> {
    let (job, step) = text.split_once('.')?;
    Some((job.parse().ok()?, StepId::parse(step)?))
}

/// The steps slurmd runs on this node: their slurmstepd sockets `<node>_<job>.<step>` in
/// SlurmdSpoolDir (a spool dir per node, so other nodes' jobs on the same host are not seen).
pub fn present_steps(spool: &Path) -> Vec<(u32, StepId)> {
    let mut steps: Vec<(u32, StepId)> = fs::read_dir(spool)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            job_step(name.rsplit_once('_')?.1)
        })
        .collect();
    steps.sort();
    steps.dedup();
    steps
}

/// This slurmstepd's step, from the title it gives itself (`slurmstepd: [J.S]`) as
/// `/proc/self/cmdline` shows it.
pub fn own_step(cmdline: &str) -> Option<(u32, StepId)> {
    let inside = cmdline.split_once("slurmstepd: [")?.1;
    job_step(inside.split(']').next()?)
}

/// Where the ledger of the plugin stacked at `context_id` lives.
pub fn ledger_path(spool: &Path, context_id: u16) -> PathBuf {
    spool.join(format!("energy-ledger.{context_id}.json"))
}

/// Where the node keeps its ledger and finds its jobs.
#[derive(Debug, Clone)]
pub struct Site {
    /// SlurmdSpoolDir, expanded for this node.
    pub spool: PathBuf,
    /// Slurm's CgroupMountpoint.
    pub cgroup_root: PathBuf,
}

/// Slurm's cgroup mount point (cgroup.conf's CgroupMountpoint default).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

impl Site {
    /// The site from slurm.conf's values, when Slurm keeps its jobs in cgroups; an error
    /// says what is missing. `spool_template` is SlurmdSpoolDir (`%n`, `%h`: `node`).
    pub fn from_conf(
        spool_template: &str,
        proctrack: &str,
        task_plugin: &str,
        node: &str,
        cgroup_root: &Path,
    ) -> Result<Self, String> {
        let mut missing = Vec::new();
        if proctrack != "proctrack/cgroup" {
            missing.push(format!(
                "ProctrackType=proctrack/cgroup (it is {proctrack})"
            ));
        }
        if !task_plugin.split(',').any(|p| p.trim() == "task/cgroup") {
            missing.push(format!("task/cgroup in TaskPlugin (it is {task_plugin})"));
        }
        if !missing.is_empty() {
            return Err(format!(
                "it needs Slurm's job cgroups: {}",
                missing.join(" and ")
            ));
        }
        CgroupTree::from_path(cgroup_root).map_err(|e| e.to_string())?;
        Ok(Self {
            spool: PathBuf::from(spool_template.replace("%n", node).replace("%h", node)),
            cgroup_root: cgroup_root.to_path_buf(),
        })
    }
}

/// slurmd's side: updates and publishes the ledger at the meter's samples.
pub struct Keeper {
    ledger: Ledger,
    tree: CgroupTree,
    spool: PathBuf,
    path: PathBuf,
    idle_watts: Option<f64>,
    updated: Option<Instant>,
    /// A failure to publish is logged once per episode.
    failing: bool,
}

impl Keeper {
    /// Continues the ledger in the spool dir, if any. An error says what is missing.
    pub fn open(site: &Site, context_id: u16, attribution: Attribution) -> Result<Self, String> {
        let tree = CgroupTree::from_path(&site.cgroup_root).map_err(|e| e.to_string())?;
        let path = ledger_path(&site.spool, context_id);
        let ledger = match Ledger::load(&path) {
            Ok(ledger) => ledger.unwrap_or_default(),
            Err(e) => {
                log::error!("{e}; starting a new energy ledger");
                Ledger::default()
            }
        };
        Ok(Self {
            ledger,
            tree,
            spool: site.spool.clone(),
            path,
            idle_watts: attribution.idle_watts,
            updated: None,
            failing: false,
        })
    }

    /// Takes the node's energy at a sample of its meter.
    pub fn on_sample(&mut self, accounting: &Accounting) {
        let now = Instant::now();
        if self
            .updated
            .is_some_and(|t| now.saturating_duration_since(t) < LEDGER_INTERVAL)
        {
            return;
        }
        let Some(point) = accounting.fresh(now, Duration::MAX) else {
            return;
        };
        self.updated = Some(now);
        let mut jobs: Vec<ObservedJob> = Vec::new();
        let mut cgroup = None;
        for (job, step) in present_steps(&self.spool) {
            if jobs.last().is_none_or(|j| j.job != job) {
                cgroup = self.tree.job(job);
                jobs.push(ObservedJob {
                    job,
                    counters: cgroup.as_ref().and_then(|c| c.counters()),
                    steps: Vec::new(),
                });
            }
            if let Some(j) = jobs.last_mut() {
                let usage = cgroup.as_ref().and_then(|c| c.step_usage_ns(step));
                j.steps.push((step, usage));
            }
        }
        let observation = Observation {
            at: point.at,
            wall: point.wall,
            node_uj: point.energy_uj,
            jobs,
        };
        self.ledger
            .update(&observation, self.idle_watts, LEDGER_INTERVAL);
        match self.ledger.store(&self.path) {
            Ok(()) if self.failing => {
                log::info!("the energy ledger is published again");
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                log::error!("{e}; steps see their energy as of the last ledger written");
                self.failing = true;
            }
            Err(_) => {}
        }
    }
}

/// slurmstepd's side: its step's joules from slurmd's ledger, as a source its meter reads.
pub struct StepShare {
    path: PathBuf,
    cmdline: PathBuf,
    step: Option<(u32, StepId)>,
    /// The highest joules the ledger itself published for the step: a figure never falls
    /// below one published before. The extrapolation on top is not kept: when the power
    /// fell after the ledger's sample, keeping it would count the old power into the
    /// step's final figure.
    published_uj: u64,
}

impl StepShare {
    /// `cmdline`: `/proc/self/cmdline`, where slurmstepd's title names its step.
    pub fn from_path(ledger: &Path, cmdline: &Path) -> Self {
        Self {
            path: ledger.to_path_buf(),
            cmdline: cmdline.to_path_buf(),
            step: None,
            published_uj: 0,
        }
    }

    fn step(&mut self) -> Option<(u32, StepId)> {
        if self.step.is_none() {
            let text = fs::read(&self.cmdline).ok()?;
            self.step = own_step(&String::from_utf8_lossy(&text).replace('\0', " "));
        }
        self.step
    }
}

impl EnergyReader for StepShare {
    fn describe(&self) -> String {
        format!(
            "this step's share of the node's energy from {}",
            self.path.display()
        )
    }

    fn read(&mut self, _now: Instant) -> Reading {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let published = match self.step() {
            // not yet named (the title is set after the plugin loads) or not yet seen
            None => Ok(None),
            Some((job, step)) => ledger::read_step(&self.path, job, step),
        };
        let (uj, complete, watts, problems) = match published {
            Ok(Some(p)) => {
                let age = (now - p.sampled_at).max(0.0);
                let ahead = age.min(LEDGER_PERIOD.as_secs_f64());
                self.published_uj = self.published_uj.max((p.account.joules * 1e6) as u64);
                let uj = self.published_uj + (p.account.watts * ahead * 1e6) as u64;
                let fresh = age <= stale_after(LEDGER_PERIOD).as_secs_f64();
                let problems = if fresh {
                    vec![]
                } else {
                    vec![format!(
                        "the energy ledger is {age:.0} s old (slurmd down?)"
                    )]
                };
                (uj, fresh, Some(p.account.watts), problems)
            }
            Ok(None) => (self.published_uj, true, Some(0.0), vec![]),
            Err(e) => (self.published_uj, false, None, vec![e.to_string()]),
        };
        Reading {
            energy_uj: uj,
            complete,
            problems,
            watts,
            sensors: Vec::new(),
        }
    }

    fn sample_period(&self) -> Duration {
        STEP_SAMPLE_PERIOD
    }

    fn needs_sampling(&self) -> bool {
        false
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
            Some((1234, StepId::EXTERN))
        );
        assert_eq!(own_step("slurmstepd: [7.0]"), Some((7, StepId(0))));
        assert_eq!(own_step("/usr/sbin/slurmstepd"), None);
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
        assert_eq!(
            present_steps(tmp.path()),
            vec![(3, StepId::BATCH), (12, StepId(0)), (12, StepId::EXTERN)]
        );
    }

    #[test]
    fn a_step_reads_its_share_extrapolated_and_never_less() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
        fs::create_dir_all(&spool).expect("spool");
        cgroup::tests::v1_tree(&cgroups, 5, "0", u64::MAX, 0, &[("step_extern", 0)]);
        let _sock = UnixListener::bind(spool.join("n1_5.4294967292")).expect("socket");
        let cmdline = tmp.path().join("cmdline");
        fs::write(&cmdline, "slurmstepd: [5.extern]\0\0").expect("cmdline");
        let site = Site {
            spool: spool.clone(),
            cgroup_root: cgroups.clone(),
        };
        let attribution = Attribution {
            mode: Mode::Shared,
            idle_watts: Some(10.0),
        };
        let mut keeper = Keeper::open(&site, 0, attribution).expect("keeper");
        let mut share = StepShare::from_path(&ledger_path(&spool, 0), &cmdline);
        assert_eq!(share.read(Instant::now()).energy_uj, 0);

        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let reading = |uj| Reading {
            energy_uj: uj,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading(0), t0, w0);
        keeper.on_sample(&accounting);
        // 2 s later, 200 J: the job alone gets it all, at 100 W
        let later = |s| (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
        let (t, w) = later(2);
        accounting.record(&reading(200_000_000), t, w);
        keeper.updated = None;
        keeper.on_sample(&accounting);
        let first = share.read(Instant::now());
        assert!(first.complete);
        assert_eq!(first.watts, Some(100.0));
        // read now, i.e. up to 2 s before the sample's wall time: no extrapolation back
        assert!(first.energy_uj >= 200_000_000, "{}", first.energy_uj);
        assert!(
            first.energy_uj <= 200_000_000 + 300_000_000,
            "capped at 3 s"
        );
        // the power falls to 0: the next sample publishes no more joules; the figure is
        // the published one again, not what was brought forward at the old power
        let (t, w) = later(3);
        accounting.record(&reading(200_000_000), t, w);
        keeper.updated = None;
        keeper.on_sample(&accounting);
        let after_fall = share.read(Instant::now());
        assert_eq!(after_fall.watts, Some(0.0));
        assert_eq!(after_fall.energy_uj, 200_000_000);
        // the ledger is continued by a new keeper
        let again = Keeper::open(&site, 0, attribution).expect("keeper");
        assert_eq!(
            again.ledger.step(5, StepId::EXTERN).map(|a| a.joules),
            Some(200.0)
        );
    }

    /// The attribution cost per sample (cgroup scan, model, ledger written) with
    /// 1, 16 and 64 one-CPU jobs of two steps each over a faithful v1 tree:
    /// `cargo test --release -p slurm-energy --lib attribution_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn attribution_cost_per_sample() {
        for jobs in [1u32, 16, 64] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
            fs::create_dir_all(&spool).expect("spool");
            let mut sockets = Vec::new();
            for job in 1..=jobs {
                let cpu = (job - 1).to_string();
                let steps = [("step_extern", 0), ("step_batch", 1000)];
                cgroup::tests::v1_tree(&cgroups, job, &cpu, u64::MAX, 1000, &steps);
                for step in [StepId::EXTERN, StepId::BATCH] {
                    let name = format!("n1_{job}.{}", step.0);
                    sockets.push(UnixListener::bind(spool.join(name)).expect("socket"));
                }
            }
            let site = Site {
                spool,
                cgroup_root: cgroups,
            };
            let mut keeper = Keeper::open(&site, 0, Attribution::default()).expect("keeper");
            let (t0, w0) = (Instant::now(), SystemTime::now());
            let mut accounting = Accounting::new(w0);
            let rounds = 200u32;
            let started = Instant::now();
            for k in 0..rounds {
                let at = Duration::from_secs(u64::from(k));
                let reading = Reading {
                    energy_uj: u64::from(k) * 300_000_000,
                    complete: true,
                    ..Reading::default()
                };
                accounting.record(&reading, t0 + at, w0 + at);
                keeper.updated = None;
                keeper.on_sample(&accounting);
            }
            println!(
                "{jobs} jobs: {:.0} us per sample",
                started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
            );
        }
    }

    #[test]
    fn the_site_needs_slurms_cgroups() {
        let tmp = tempfile::tempdir().expect("tempdir");
        cgroup::tests::v1_tree(tmp.path(), 1, "0", u64::MAX, 0, &[]);
        let site = Site::from_conf(
            "/var/spool/slurmd/%n",
            "proctrack/cgroup",
            "task/affinity,task/cgroup",
            "n1",
            tmp.path(),
        )
        .expect("site");
        assert_eq!(site.spool, Path::new("/var/spool/slurmd/n1"));
        let e = Site::from_conf("/s", "proctrack/linuxproc", "task/none", "n1", tmp.path())
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

    #[test]
    fn without_cgroups_the_keeper_says_what_is_missing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let site = Site {
            spool: tmp.path().to_path_buf(),
            cgroup_root: tmp.path().join("nothing"),
        };
        let e = Keeper::open(&site, 0, Attribution::default())
            .err()
            .expect("error");
        assert!(e.contains("cgroup"), "{e}");
    }
}
