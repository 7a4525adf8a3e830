//! One meter per node: slurmd's instance reads the hardware and keeps the node's ledger;
//! every slurmstepd reads its figure there. With `EnergyAttribution=shared` each job on a
//! shared node gets its share of the node's energy; a source of devices Slurm allocates
//! (GPUs) charges each job the devices it holds, in every mode ([`holders`], [`gres`]).
//!
//! slurmd's instance owns the node's meter; at each of its samples (at most once per
//! [`LEDGER_PERIOD`]) a [`Keeper`] updates the node's account and, in shared mode, reads the
//! cgroups of the jobs slurmd runs and splits the interval's energy among them ([`model`]),
//! and publishes the cumulative joules of the node and of every job and step in a root-only
//! file under SlurmdSpoolDir ([`ledger`]). Each slurmstepd reads its own figure from that
//! file ([`StepFigure`]), brought up to the moment of the call at the last power, and from a
//! fresh sample at its edges ([`doorbell`]): no RPC, no sampler of its own.
//!
//! The Keeper learns the steps from their sockets in SlurmdSpoolDir, finds each new
//! step's slurmstepd once ([`procs`]), and reads the step's cgroup from where that
//! process (or, failing that, one of its tasks) is ([`cgroup`]), at the first sample that
//! sees it there; the cgroup is kept until the step's socket is gone, so a sample in
//! steady state reads counter files only.

pub mod cgroup;
pub mod doorbell;
pub mod grant;
pub mod gres;
pub mod holders;
pub mod ledger;
pub mod model;
pub mod procs;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::accounting::Accounting;
use crate::accounting::MAX_SENSORS;
use crate::config::{ConfigError, KeyValues};
use crate::source::{DeviceReading, EnergyReader, Reading, SensorReading, stale_after};
use cgroup::{CgroupTree, StepCgroup};
use doorbell::Pace;
use grant::Owner;
use gres::GresOrder;
use holders::Holders;
use ledger::{
    Ledger, MAX_GAP, Observation, ObservedDevice, ObservedJob, ObservedStep, Part, Split,
};
use procs::Procs;

pub const MODE_KEY: &str = "EnergyAttribution";
pub const IDLE_KEY: &str = "EnergyAttributionIdleWatts";
/// The keys every plugin of the family reads beside its source's.
pub const KEYS: &[&str] = &[MODE_KEY, IDLE_KEY];
/// The ledger is updated at the meter's samples (every second or faster), at most this
/// often; it is a sample period (about a second) old at most.
const LEDGER_INTERVAL: Duration = Duration::from_millis(500);
/// How old the ledger may get while slurmd samples normally.
pub const LEDGER_PERIOD: Duration = Duration::from_secs(1);

/// Ended steps' grants are swept at every this many ledger updates (about a minute).
const GRANT_SWEEP_SAMPLES: u64 = 60;
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

/// `J.S` as in a step's name; a heterogeneous job's component (`J.S.C`) is not split.
fn job_step(text: &str) -> Option<(u32, StepId)> {
    let (job, step) = text.split_once('.')?;
    Some((job.parse().ok()?, StepId::parse(step)?))
}

/// The steps slurmd runs on this node, with their slurmstepd sockets `<node>_<job>.<step>`
/// in SlurmdSpoolDir (a spool dir per node, so other nodes' jobs on the same host are not
/// seen), in job order.
pub fn present_steps(spool: &Path) -> BTreeMap<(u32, StepId), PathBuf> {
    fs::read_dir(spool)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((job_step(name.rsplit_once('_')?.1)?, e.path()))
        })
        .collect()
}

/// A slurmstepd's step, from the title it gives itself (`slurmstepd: [J.S]`, 26.05's step
/// manager `slurmstepd: [J.S stepmgr]`) as `/proc/<pid>/cmdline` shows it.
pub fn own_step(cmdline: &str) -> Option<(u32, StepId)> {
    let inside = cmdline.split_once("slurmstepd: [")?.1;
    job_step(inside.split([']', ' ']).next()?)
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
    /// Where the processes are shown ([`procs::PROC_ROOT`]).
    pub proc_root: PathBuf,
}

/// Slurm's cgroup mount point (cgroup.conf's CgroupMountpoint default).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// cgroup.conf's CgroupMountpoint, or its default.
pub fn cgroup_mountpoint(cgroup_conf: &str) -> PathBuf {
    crate::config::file_value(cgroup_conf, "CgroupMountpoint")
        .map_or_else(|| PathBuf::from(CGROUP_ROOT), PathBuf::from)
}

/// SlurmdSpoolDir for `node` on this host (`%n`: the node's name, `%h`: the host's).
pub fn spool_for_node(template: &str, node: &str) -> PathBuf {
    PathBuf::from(crate::source::expand_node(template, node))
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
        if !missing.is_empty() {
            return Err(format!(
                "it needs Slurm's job cgroups: {}",
                missing.join(" and ")
            ));
        }
        CgroupTree::from_path(cgroup_root).map_err(|e| e.to_string())?;
        Ok(Self {
            spool,
            cgroup_root: cgroup_root.to_path_buf(),
            proc_root: PathBuf::from(procs::PROC_ROOT),
        })
    }
}

/// How many samples apart the search for a step's slurmstepd is repeated, at most, while
/// it is not found: a stale socket must not cost a pass over /proc at every sample.
const MAX_SEARCH_GAP: u64 = 64;
/// A step whose socket is younger than this is searched for at every sample until found:
/// until then its job has no share (the others would be charged its part), and a loaded
/// node can take seconds to title a new slurmstepd. Only an older socket backs off.
const YOUNG_SOCKET: Duration = Duration::from_secs(60);

/// Whether the socket at `path` was made less than [`YOUNG_SOCKET`] ago (or its age is
/// unknown: searched as a new one).
fn young_socket(path: &Path) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < YOUNG_SOCKET)
}

/// What the Keeper knows of where a step runs.
#[derive(Debug, Clone, PartialEq)]
enum Place {
    /// Its slurmstepd is not found (not yet titled, or gone): searched again at sample
    /// `next`, `gap` samples after the last search.
    Unseen { next: u64, gap: u64 },
    /// Its slurmstepd, not yet in the step's cgroup (under v2 it first waits in `system/`).
    Stepd(u32),
    /// Its slurmstepd, and the step's cgroup.
    Found(u32, StepCgroup),
}

impl Place {
    /// Its slurmstepd, once found.
    fn stepd(&self) -> Option<u32> {
        match self {
            Self::Stepd(pid) | Self::Found(pid, _) => Some(*pid),
            Self::Unseen { .. } => None,
        }
    }
}

/// What is told the ledger at each update, and who runs each job when asked for (the
/// metrics file's writer).
pub type Publisher = Box<dyn FnMut(&Ledger, Option<&HashMap<u32, Owner>>) + Send>;

/// slurmd's side: updates and publishes the ledger at the meter's samples.
pub struct Keeper {
    ledger: Ledger,
    split: Split,
    /// The cgroup tree the jobs are read in, in shared mode; in node mode no cgroup is
    /// read and the ledger keeps the node's account.
    tree: Option<CgroupTree>,
    /// Who holds the node's devices, in [`Split::Devices`].
    holders: Option<Holders>,
    procs: Procs,
    /// Where each present step runs, dropped with the step.
    places: HashMap<(u32, StepId), Place>,
    /// When each present step's slurmstepd started (its process's start once found, its
    /// socket's time until then).
    starts: HashMap<(u32, StepId), Option<SystemTime>>,
    /// Samples taken, the clock of [`Place::Unseen`].
    samples: u64,
    spool: PathBuf,
    path: PathBuf,
    /// When the ledger was last updated, and whether a step asked for a fresh one
    /// ([`doorbell`]): the next sample updates it as the pace of rings allows, however
    /// often steps ring.
    pace: Arc<Pace>,
    /// A failure to publish is logged once per episode.
    failing: bool,
    /// Where the ledger is also written for Prometheus, and the series' labels.
    publish: Option<Publisher>,
    /// Whether the publisher is told who runs each job ([`Self::owners`]).
    publish_owners: bool,
    /// Who runs each job, learned from Slurm's step records for the publisher.
    owners: HashMap<u32, Owner>,
    /// slurmd's user, which its slurmstepds run as.
    stepd_uid: u32,
}

impl Keeper {
    /// `EnergyAttribution=shared`: splits the node among the jobs of `site`, at the static
    /// power `idle_watts` (learned when `None`). An error says what is missing.
    pub fn shared(site: &Site, context_id: u16, idle_watts: Option<f64>) -> Result<Self, String> {
        let tree = CgroupTree::from_path(&site.cgroup_root).map_err(|e| e.to_string())?;
        let mut keeper = Self::node(&site.spool, context_id)?;
        keeper.split = Split::Shared { idle_watts };
        keeper.tree = Some(tree);
        keeper.procs = Procs::from_path(&site.proc_root);
        Ok(keeper)
    }

    /// A source of devices Slurm allocates (rust_gpu): each job is charged the devices
    /// it holds by `order` (shared ones split, `idle_watts` static power each, learned when
    /// `None`), whatever `EnergyAttribution` says. An error says what is missing.
    pub fn devices(
        spool: &Path,
        context_id: u16,
        order: GresOrder,
        idle_watts: Option<f64>,
        proc_root: &Path,
    ) -> Result<Self, String> {
        let mut keeper = Self::node(spool, context_id)?;
        keeper.split = Split::Devices { idle_watts };
        keeper.holders = Some(Holders::new(order, spool));
        keeper.procs = Procs::from_path(proc_root);
        Ok(keeper)
    }

    /// `EnergyAttribution=node`: the ledger keeps the node's account, from which each step
    /// takes the node's energy since it began. Continues the ledger in the spool dir, if
    /// any; an error says what is missing.
    pub fn node(spool: &Path, context_id: u16) -> Result<Self, String> {
        if !spool.is_dir() {
            return Err(format!(
                "SlurmdSpoolDir {} is not a directory",
                spool.display()
            ));
        }
        let path = ledger_path(spool, context_id);
        // a slurmd killed while it wrote left a temporary file beside the ledger
        crate::replace::sweep(&path);
        let ledger = match Ledger::load(&path) {
            Ok(ledger) => ledger.unwrap_or_default(),
            Err(e) => {
                log::error!(
                    "{e}; starting a new energy ledger (running steps keep what they had \
                     counted and go on from its start)"
                );
                Ledger::default()
            }
        };
        Ok(Self {
            ledger,
            split: Split::Node,
            tree: None,
            holders: None,
            procs: Procs::from_path(Path::new(procs::PROC_ROOT)),
            places: HashMap::new(),
            starts: HashMap::new(),
            samples: 0,
            spool: spool.to_path_buf(),
            path,
            pace: Arc::default(),
            failing: false,
            publish: None,
            publish_owners: false,
            owners: HashMap::new(),
            stepd_uid: nix::unistd::getuid().as_raw(),
        })
    }

    /// How jobs are charged, as the metrics label it: `node`, `shared` or `devices`.
    pub fn attribution(&self) -> &'static str {
        match self.split {
            Split::Node => "node",
            Split::Shared { .. } => "shared",
            Split::Devices { .. } => "devices",
        }
    }

    /// Also hands the ledger to `publish` at each update (the metrics file), with who runs
    /// each job if `owners`.
    pub fn publishing(mut self, owners: bool, publish: Publisher) -> Self {
        self.publish = Some(publish);
        self.publish_owners = owners;
        self
    }

    /// Says in the ledger what the node's meter reads, for whoever inspects the node.
    pub fn describe_source(&mut self, source: String) {
        self.ledger.describe_source(source);
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Told by the doorbell that a step asks for a fresh ledger; paces the updates.
    pub fn pace(&self) -> Arc<Pace> {
        Arc::clone(&self.pace)
    }

    /// Takes the node's energy at a sample of its meter (`accounting`, of `reading`), and
    /// its devices'.
    pub fn on_sample(&mut self, accounting: &Accounting, reading: &Reading) {
        let now = Instant::now();
        let Some(point) = accounting.fresh(now, Duration::MAX) else {
            return;
        };
        let devices = &reading.devices[..];
        if !self.pace.take(now, LEDGER_INTERVAL) {
            return;
        }
        // in every mode: node mode charges each job the node's energy since it began
        let jobs = self.observe(devices);
        let devices = self.observe_devices(devices);
        let parts = accounting
            .sensor_records(now, Duration::MAX)
            .into_iter()
            .filter_map(|(label, record)| {
                Some(Part {
                    label: label.to_string(),
                    joules: record.consumed_j? as f64,
                    watts: record.current_watts.map(f64::from),
                })
            })
            .collect();
        let observation = Observation {
            at: point.at,
            wall: point.wall,
            node_uj: point.energy_uj,
            settled: point.settled,
            // the counts behind the point: of this reading, unless it was incomplete (the
            // point is then an earlier one's)
            counts: if reading.complete {
                reading.counts.clone()
            } else {
                Vec::new()
            },
            jobs,
            parts,
            devices,
        };
        self.ledger
            .update(&observation, self.split, LEDGER_INTERVAL);
        self.samples += 1;
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
        if let Some(publish) = &mut self.publish {
            let kept: HashSet<u32> = self.ledger.jobs().map(|j| j.id).collect();
            self.owners.retain(|job, _| kept.contains(job));
            publish(&self.ledger, self.publish_owners.then_some(&self.owners));
        }
    }

    /// The devices' energy and their use per job since the last sample.
    fn observe_devices(&mut self, devices: &[DeviceReading]) -> Vec<ObservedDevice> {
        let Some(holders) = self.holders.as_mut() else {
            return Vec::new();
        };
        let stepds: HashMap<u32, u32> = self
            .places
            .iter()
            .filter_map(|((job, _), place)| Some((place.stepd()?, *job)))
            .collect();
        holders.observe(&self.procs, &stepds, devices)
    }

    /// The present jobs and steps with their counters and the devices they hold.
    fn observe(&mut self, devices: &[DeviceReading]) -> Vec<ObservedJob> {
        let present = present_steps(&self.spool);
        self.locate(&present);
        if self.samples.is_multiple_of(GRANT_SWEEP_SAMPLES) {
            grant::Grant::remove_ended(&self.spool, &present.keys().copied().collect());
        }
        // a job's owner is looked up only where the publisher shows owners
        if self.publish.is_some() && self.publish_owners {
            self.learn_owners(&present);
        }
        if let Some(holders) = self.holders.as_mut() {
            holders.retain(&present.keys().copied().collect());
        }
        let mut jobs: Vec<ObservedJob> = Vec::new();
        for &(job, step) in present.keys() {
            let holds = match self.holders.as_mut() {
                Some(holders) => holders.holds(&self.procs, (job, step), devices),
                None => Vec::new(),
            };
            let mut cgroup = match self.places.get_mut(&(job, step)) {
                Some(Place::Found(_, cgroup)) => Some(cgroup),
                _ => None,
            };
            if jobs.last().is_none_or(|j| j.job != job) {
                jobs.push(ObservedJob {
                    job,
                    counters: None,
                    steps: Vec::new(),
                });
            }
            if let Some(j) = jobs.last_mut() {
                // the job's directory is the parent of any of its steps': read it once
                if j.counters.is_none() {
                    j.counters = cgroup.as_mut().and_then(|c| c.job_counters());
                }
                // the extern step is charged its job's share whatever its own CPU time
                let usage_ns = match step {
                    StepId::EXTERN => None,
                    _ => cgroup.and_then(StepCgroup::step_usage_ns),
                };
                j.steps.push(ObservedStep {
                    id: step,
                    usage_ns,
                    started: self.starts.get(&(job, step)).copied().flatten(),
                    holds,
                });
            }
        }
        jobs
    }
}

impl Keeper {
    /// Who runs each present job not yet known: the user Slurm launched one of its steps
    /// as ([`grant::Grant`]), never what its tasks say.
    fn learn_owners(&mut self, present: &BTreeMap<(u32, StepId), PathBuf>) {
        for (job, step) in present.keys() {
            if self.owners.contains_key(job) {
                continue;
            }
            if let Some(grant) = grant::Grant::read(&self.spool, *job, *step) {
                self.owners.insert(*job, Owner { user: grant.user });
            }
        }
    }

    /// Brings [`Self::places`] up to the present steps: forgets the ended ones, searches
    /// /proc once for the slurmstepds of those not seen yet, and reads the cgroup of each
    /// slurmstepd found whose step has none yet.
    fn locate(&mut self, present: &BTreeMap<(u32, StepId), PathBuf>) {
        let now = self.samples;
        self.places.retain(|step, _| present.contains_key(step));
        self.starts.retain(|step, _| present.contains_key(step));
        for (step, socket) in present {
            self.starts
                .entry(*step)
                .or_insert_with(|| fs::metadata(socket).and_then(|m| m.modified()).ok());
        }
        let search: HashSet<(u32, StepId)> = present
            .keys()
            .filter(|step| match self.places.get(step) {
                None => true,
                Some(Place::Unseen { next, .. }) => *next <= now,
                Some(_) => false,
            })
            .copied()
            .collect();
        if !search.is_empty() {
            let mut stepds = self.procs.stepds(&search, self.stepd_uid);
            for step in search {
                let pids = stepds.remove(&step).unwrap_or_default();
                // only the step's slurmstepd holds its socket: not a process titled as it,
                // nor another node's slurmstepd of the same step on the same host
                let pid = match pids[..] {
                    [] => None,
                    _ => self.procs.holding_socket(&pids, &present[&step]),
                };
                let place = match (pid, self.places.get(&step)) {
                    (Some(pid), _) => {
                        // charged from its process's start, not its socket's (made later)
                        if let Some(started) = self.procs.started(pid) {
                            self.starts.insert(step, Some(started));
                        }
                        Place::Stepd(pid)
                    }
                    (None, Some(Place::Unseen { gap, .. })) => {
                        let gap = if young_socket(&present[&step]) {
                            1
                        } else {
                            (gap * 2).min(MAX_SEARCH_GAP)
                        };
                        Place::Unseen {
                            next: now + gap,
                            gap,
                        }
                    }
                    (None, _) => Place::Unseen {
                        next: now + 1,
                        gap: 1,
                    },
                };
                self.places.insert(step, place);
            }
        }
        let Some(tree) = &self.tree else {
            return;
        };
        for ((_, step), place) in &mut self.places {
            if let Place::Stepd(pid) = *place {
                match step_cgroup(tree, &self.procs, pid, *step) {
                    Some(Some(cgroup)) => *place = Place::Found(pid, cgroup),
                    Some(None) => {}
                    // the slurmstepd is gone while its socket is not: look again
                    None => {
                        *place = Place::Unseen {
                            next: now + 1,
                            gap: 1,
                        }
                    }
                }
            }
        }
    }
}

/// The step's cgroup from where its slurmstepd is or, where that does not show it (v1
/// without task/cgroup's cpuset or memory constraints), one of its tasks; `None` when the
/// slurmstepd is gone.
fn step_cgroup(
    tree: &CgroupTree,
    procs: &Procs,
    stepd: u32,
    step: StepId,
) -> Option<Option<StepCgroup>> {
    let own = procs.cgroup(stepd)?;
    Some(tree.step_cgroup(&own, step).or_else(|| {
        procs
            .children(stepd)
            .into_iter()
            .filter_map(|task| procs.cgroup(task))
            .find_map(|text| tree.step_cgroup(&text, step))
    }))
}

/// slurmstepd's side: its step's figure from slurmd's ledger, as a source its meter reads.
/// In node mode the node's energy since the step's first reading (when its slurmstepd
/// opened the plugin); in shared mode the step's share. Either is brought up to the moment
/// of the call at the last power the ledger published, at most [`LEDGER_PERIOD`] ahead,
/// unless energy plugins are stacked ([`StepFigure::stacked`]).
///
/// When the ledger cannot be read, is stale (slurmd gone) or was begun anew (slurmd lost
/// it), the step keeps the figure it had, says so once, and goes on from the new ledger's
/// start with the time between estimated at its last power: never a bogus figure.
pub struct StepFigure {
    path: PathBuf,
    /// This process: its title names its step, its tasks' end is the step's last edge.
    procs: Procs,
    pid: u32,
    shared: bool,
    /// Whether a figure is brought forward from the ledger's sample to the call.
    bring_forward: bool,
    step: Option<(u32, StepId)>,
    /// When this process started (Unix time), once read: a step of its name in the ledger
    /// begun before it is a run before this one.
    started: Option<f64>,
    /// What the step counted in the ledger it reads now.
    counted: Option<Counted>,
    /// What it counted in ledgers before this one.
    carried_uj: u64,
    /// The trouble with the ledger now, logged when it began.
    trouble: Option<String>,
    /// slurmd did not answer the last ring (logged when it began).
    unanswered: bool,
    /// In node mode, the node's parts as the ledger last gave them, for the profile.
    parts: Vec<SensorReading>,
}

/// A part's label as a reading carries it (`&'static`, as a source's own): each distinct
/// label is kept once for the process's life, and a ledger that names more than a few
/// dozen gets no more.
fn static_label(label: &str) -> Option<&'static str> {
    static LABELS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = labels.iter().find(|l| **l == label) {
        return Some(known);
    }
    if labels.len() >= 4 * MAX_SENSORS {
        return None;
    }
    let kept: &'static str = Box::leak(label.to_owned().into_boxed_str());
    labels.push(kept);
    Some(kept)
}

#[derive(Debug, Clone, Copy)]
struct Counted {
    epoch: u64,
    /// The ledger's figure at the step's start: in node mode the node's energy when the
    /// step first read it, in shared mode 0 (a share starts with the step).
    base_j: f64,
    /// The highest figure the ledger itself published: the figure never falls below one
    /// published before. The extrapolation on top is not kept: when the power fell after
    /// the ledger's sample, keeping it would count the old power into the step's final
    /// figure.
    published_j: f64,
    /// The step's figure at its last read, its power, and when.
    figure_uj: u64,
    watts: f64,
    read_at: f64,
    /// When the ledger it last counted in was sampled.
    sampled_at: f64,
}

/// Whether a read comes from one of Slurm's periodic polls, its threads `acctg` (a step's
/// JobAcctGatherFrequency) and `acctg_energy`/`acctg_prof` (profiling), named so in every
/// release: never a step's last figure, which is taken as its tasks are removed, from its
/// main thread. A step without tasks at such a poll is not at an edge: 26.05's extern step
/// never has any, and would otherwise ask slurmd for a sample at each of its polls.
fn periodic_poll(thread: &str) -> bool {
    thread.starts_with("acctg")
}

fn unix_now() -> f64 {
    ledger::unix(SystemTime::now())
}

impl StepFigure {
    /// `ledger`: the node's ledger file; `procs` shows this process, `pid`; `shared`: the
    /// step's share, else the node's energy since the step began.
    pub fn from_path(ledger: &Path, procs: &Procs, pid: u32, shared: bool) -> Self {
        Self {
            path: ledger.to_path_buf(),
            procs: procs.clone(),
            pid,
            shared,
            bring_forward: true,
            step: None,
            started: None,
            counted: None,
            carried_uj: 0,
            trouble: None,
            unanswered: false,
            parts: Vec::new(),
        }
    }

    /// Energy plugins are stacked: Slurm adds up what each answers since its answer before,
    /// so a figure brought forward at a power that then fell would stay counted. The
    /// ledger's figure is taken as it is: at Slurm's periodic polls at most a sample period
    /// old; at a step's edges and other reads (sstat's) from a sample taken for it.
    pub fn stacked(mut self) -> Self {
        self.bring_forward = false;
        self
    }

    fn step(&mut self) -> Option<(u32, StepId)> {
        if self.step.is_none() {
            let text = fs::read(self.procs.cmdline_path(self.pid)).ok()?;
            self.step = own_step(&String::from_utf8_lossy(&text).replace('\0', " "));
        }
        self.step
    }

    /// Whether a step of this name begun at `since` (Unix time) is this run of it, not an
    /// earlier run of a requeued job the ledger still holds.
    fn this_run(&mut self, since: f64) -> bool {
        if self.started.is_none() {
            self.started = self.procs.started(self.pid).map(ledger::unix);
        }
        self.started
            .is_none_or(|started| since >= started - ledger::RUN_SLACK)
    }

    fn total_uj(&self) -> u64 {
        self.carried_uj + self.counted.map_or(0, |c| c.figure_uj)
    }

    /// Counts the step's figure in `ledger` at unix time `now`; returns its power, or why
    /// the ledger cannot be used.
    fn count(&mut self, ledger: &Ledger, now: f64) -> Result<f64, String> {
        let age = (now - ledger.sampled_at()).max(0.0);
        let ahead = if self.bring_forward {
            age.min(LEDGER_PERIOD.as_secs_f64())
        } else {
            0.0
        };
        let (joules, watts) = if self.shared {
            match self.step() {
                Some((job, step)) => ledger
                    .step(job, step)
                    .filter(|a| self.this_run(a.since))
                    .map_or((0.0, 0.0), |a| (a.joules, a.watts)),
                // not yet named: the title is set after the plugin loads
                None => (0.0, 0.0),
            }
        } else {
            self.parts = ledger
                .parts()
                .iter()
                .filter_map(|p| {
                    Some(SensorReading {
                        label: static_label(&p.label)?,
                        energy_uj: Some((p.joules * 1e6) as u64),
                        watts: p.watts,
                    })
                })
                .collect();
            let node = ledger.node();
            (node.joules, node.watts)
        };
        let epoch = ledger.epoch();
        if age > stale_after(LEDGER_PERIOD).as_secs_f64() {
            // slurmd is gone: its last sample is the last figure known, taken as it is (not
            // brought forward) by a step that counted in this ledger, and kept
            if let Some(c) = self
                .counted
                .as_mut()
                .filter(|c| c.epoch == epoch && ledger.sampled_at() > c.sampled_at)
            {
                c.published_j = c.published_j.max(joules);
                let figure_j = (c.published_j - c.base_j).max(0.0);
                c.figure_uj = (figure_j * 1e6) as u64;
                c.sampled_at = ledger.sampled_at();
            }
            return Err(format!(
                "the energy ledger {} is {age:.0} s old (slurmd is not sampling)",
                self.path.display()
            ));
        }
        match self.counted {
            Some(c) if c.epoch == epoch => {}
            previous => {
                if let Some(c) = previous {
                    let begun = epoch as f64 / 1e6;
                    let gap = (begun - c.read_at).clamp(0.0, MAX_GAP.as_secs_f64());
                    let estimated_uj = (c.watts * gap * 1e6) as u64;
                    self.carried_uj += c.figure_uj + estimated_uj;
                    log::warn!(
                        "slurmd began a new energy ledger: this step keeps its {:.0} J, adds \
                         {:.0} J estimated for the {gap:.1} s between, and goes on from the \
                         new ledger's start",
                        c.figure_uj as f64 / 1e6,
                        estimated_uj as f64 / 1e6
                    );
                }
                // the node's energy at this first read (the step's first, at its plugin's
                // load, from a fresh sample: it rang for one)
                let base_j = match previous {
                    None if !self.shared => joules + watts * ahead,
                    _ => 0.0,
                };
                self.counted = Some(Counted {
                    epoch,
                    base_j,
                    published_j: 0.0,
                    figure_uj: 0,
                    watts,
                    read_at: now,
                    sampled_at: ledger.sampled_at(),
                });
            }
        }
        if let Some(c) = &mut self.counted {
            c.published_j = c.published_j.max(joules);
            let figure_j = (c.published_j + watts * ahead - c.base_j).max(0.0);
            c.figure_uj = (figure_j * 1e6) as u64;
            c.watts = watts;
            c.read_at = now;
            c.sampled_at = ledger.sampled_at();
        }
        Ok(watts)
    }
}

impl EnergyReader for StepFigure {
    fn describe(&self) -> String {
        let what = if self.shared {
            "this step's share of the node's energy"
        } else {
            "the node's energy since this step began"
        };
        format!("{what}, from slurmd's ledger {}", self.path.display())
    }

    fn read(&mut self, _now: Instant) -> Reading {
        // at the step's edges (before its tasks start, after they end) the figure is the
        // step's first or last: it needs a ledger sampled now; so does any read but Slurm's
        // periodic polls (sstat's) where plugins are stacked, whose figures are not brought
        // forward
        let tasks = !self.procs.children(self.pid).is_empty();
        let edge = match self.counted {
            None => !tasks,
            Some(_) => {
                let periodic = self
                    .procs
                    .calling_thread()
                    .is_some_and(|t| periodic_poll(&t));
                !periodic && (!tasks || !self.bring_forward)
            }
        };
        let unanswered =
            edge && !doorbell::freshen(&doorbell::doorbell_path(&self.path), &self.path).is_fresh();
        let now = unix_now();
        let counted = match Ledger::load(&self.path) {
            Ok(Some(ledger)) => {
                let age = now - ledger.sampled_at();
                if unanswered && age > 2.0 * LEDGER_PERIOD.as_secs_f64() && !self.unanswered {
                    log::warn!(
                        "slurmd did not answer this step's request for a fresh energy ledger: \
                         its figure is as of the ledger's last sample, {age:.1} s ago"
                    );
                }
                self.unanswered = unanswered;
                self.count(&ledger, now)
            }
            Ok(None) => Err(format!(
                "there is no energy ledger {} (slurmd does not run this plugin, or cannot \
                 write its spool dir)",
                self.path.display()
            )),
            Err(e) => Err(e.to_string()),
        };
        let watts = match counted {
            Ok(watts) => {
                if self.trouble.take().is_some() {
                    log::info!("the energy ledger is read again");
                }
                Some(watts)
            }
            Err(why) => {
                if self.trouble.is_none() {
                    match self.counted {
                        Some(_) => log::error!(
                            "{why}; this step keeps its figure of {:.0} J until it can read \
                             the ledger again",
                            self.total_uj() as f64 / 1e6
                        ),
                        None => log::error!("{why}; this step's energy is unavailable"),
                    }
                }
                self.trouble = Some(why);
                None
            }
        };
        Reading {
            energy_uj: self.total_uj(),
            // a step that never read the ledger has no figure (NO_VAL), not 0 J
            complete: self.counted.is_some(),
            problems: Vec::new(),
            watts,
            unsettled: false,
            sensors: self.parts.clone(),
            ..Reading::default()
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
    use std::sync::atomic::{AtomicU32, Ordering};

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
        assert_eq!(
            own_step("slurmstepd: [8.extern stepmgr]"),
            Some((8, StepId::EXTERN))
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
            vec![(3, StepId::BATCH), (12, StepId(0)), (12, StepId::EXTERN)]
        );
        assert_eq!(present[&(12, StepId(0))], tmp.path().join("n1_12.0"));
    }

    #[test]
    fn a_step_reads_its_share_extrapolated_and_never_less() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
        fs::create_dir_all(&spool).expect("spool");
        let job = cgroup::tests::v1_tree(
            &cgroups,
            "slurm",
            5,
            "0",
            u64::MAX,
            0,
            &[("step_extern", 0)],
        );
        let _sock = UnixListener::bind(spool.join("n1_5.4294967292")).expect("socket");
        let proc_root = tmp.path().join("proc");
        let stepd = cgroup::tests::v1_stepd(&job, "step_extern", true);
        let socket = spool.join("n1_5.4294967292");
        procs::tests::stepd(&proc_root, 40, (5, StepId::EXTERN), &stepd, &socket);
        let procs = Procs::from_path(&proc_root);
        let site = Site {
            spool: spool.clone(),
            cgroup_root: cgroups.clone(),
            proc_root,
        };
        let attribution = Attribution {
            mode: Mode::Shared,
            idle_watts: Some(10.0),
        };
        let mut keeper = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
        let mut share = StepFigure::from_path(&ledger_path(&spool, 0), &procs, 40, true);
        // no ledger yet: no figure at all, not 0 J
        assert!(!share.read(Instant::now()).complete);

        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let reading = |uj| Reading {
            energy_uj: uj,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading(0), t0, w0);
        keeper.on_sample(&accounting, &Reading::default());
        // 2 s later, 200 J: the job alone gets it all, at 100 W
        let later = |s| (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
        let (t, w) = later(2);
        accounting.record(&reading(200_000_000), t, w);
        keeper.pace = Arc::default();
        keeper.on_sample(&accounting, &Reading::default());
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
        keeper.pace = Arc::default();
        keeper.on_sample(&accounting, &Reading::default());
        let after_fall = share.read(Instant::now());
        assert_eq!(after_fall.watts, Some(0.0));
        assert_eq!(after_fall.energy_uj, 200_000_000);
        // the ledger is continued by a new keeper
        let again = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
        assert_eq!(
            again.ledger.step(5, StepId::EXTERN).map(|a| a.joules),
            Some(200.0)
        );
    }

    /// A requeued job's new slurmstepd reads the ledger before slurmd has seen its run: the
    /// step of its name that the ledger holds began 30 s before this process, and is the
    /// run before; it counts nothing of it. Once the ledger holds this run's step, it
    /// counts that.
    #[test]
    fn a_step_counts_only_its_own_run_of_its_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let proc_root = tmp.path().join("proc");
        fs::create_dir_all(proc_root.join("40")).expect("proc");
        // 1 000 s since boot; the process started 5 s ago (99 500 ticks), titled as 7.batch
        fs::write(proc_root.join("uptime"), "1000.00 1.00\n").expect("uptime");
        fs::write(
            proc_root.join("40/stat"),
            "40 (slurmstepd) S 1 40 40 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99500 0 0\n",
        )
        .expect("stat");
        fs::write(proc_root.join("40/cmdline"), "slurmstepd: [7.batch]\0").expect("cmdline");
        let path = tmp.path().join("ledger.json");
        let now = unix_now();
        let publish = |since: f64, joules: f64| {
            let account = serde_json::json!({"joules": joules, "watts": 100.0, "since": since});
            let text = serde_json::json!({
                "version": ledger::VERSION, "epoch": ((now - 100.0) * 1e6) as u64,
                "sampled_at": unix_now(), "node": account, "parts": [],
                "learned_idle_watts": null,
                "jobs": [{"job": 7, "last_seen": now, "account": account,
                          "steps": [{"step": StepId::BATCH.0, "last_seen": now, "account": account}]}],
            });
            fs::write(&path, text.to_string()).expect("ledger");
        };
        let mut step =
            StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, true).stacked();
        publish(now - 35.0, 3_000.0);
        let first = step.read(Instant::now());
        assert!(first.complete);
        assert_eq!(first.energy_uj, 0, "the run before is not this step's");
        publish(now - 5.0, 400.0);
        assert_eq!(step.read(Instant::now()).energy_uj, 400_000_000);
    }

    /// A ledger's node account at unix time `sampled_at`, begun at `epoch`, published.
    fn publish(path: &Path, epoch: f64, sampled_at: f64, joules: f64, watts: f64) {
        let text = serde_json::json!({
            "version": ledger::VERSION,
            "epoch": (epoch * 1e6) as u64,
            "sampled_at": sampled_at,
            "node": {"joules": joules, "watts": watts, "since": epoch},
            "parts": [{"label": "Accel0", "joules": joules / 2.0, "watts": null}],
            "learned_idle_watts": null,
            "jobs": [],
        });
        fs::write(path, text.to_string()).expect("ledger");
    }

    /// A step asks slurmd for a fresh sample at its edges only: its first read, and a read
    /// without tasks from elsewhere than Slurm's periodic polls (its last, as its tasks are
    /// removed, or sstat's). A step that never has tasks (26.05's extern step) does not ring
    /// at each of its polls.
    #[test]
    fn a_step_rings_at_its_edges_not_at_slurms_periodic_polls() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let proc_root = tmp.path().join("proc");
        let path = tmp.path().join("energy-ledger.0.json");
        let rings = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&rings);
        let now = unix_now();
        publish(&path, now - 100.0, now, 1000.0, 200.0);
        let ledger = path.clone();
        let pace = Arc::default();
        let _bell = doorbell::Doorbell::open(&doorbell::doorbell_path(&path), pace, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            publish(&ledger, now - 100.0, unix_now(), 1000.0, 200.0);
        })
        .expect("doorbell");
        procs::tests::process(&proc_root, 40, "slurmstepd: [5.extern]", "0::/");
        let read_from = |step: &mut StepFigure, thread: &str| {
            procs::tests::write_thread_name(&proc_root, thread);
            // the ledger written just now would need no ring
            std::thread::sleep(Duration::from_millis(30));
            assert!(step.read(Instant::now()).complete);
            rings.load(Ordering::SeqCst)
        };
        let mut step = StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false);
        assert_eq!(read_from(&mut step, "acctg"), 1, "the first read rings");
        assert_eq!(read_from(&mut step, "acctg"), 1, "a periodic poll does not");
        assert_eq!(read_from(&mut step, "acctg_energy"), 1, "nor a profile's");
        assert_eq!(read_from(&mut step, "slurmstepd"), 2, "the last poll does");
        procs::tests::child(&proc_root, 40, 41);
        assert_eq!(read_from(&mut step, "slurmstepd"), 2, "not while tasks run");
        // stacked, a figure is not brought forward: sstat's read while tasks run rings
        let mut stacked =
            StepFigure::from_path(&path, &Procs::from_path(&proc_root), 40, false).stacked();
        assert_eq!(
            read_from(&mut stacked, "acctg"),
            2,
            "with tasks, the first read does not"
        );
        assert_eq!(
            read_from(&mut stacked, "acctg"),
            2,
            "stacked: a periodic poll does not"
        );
        assert_eq!(
            read_from(&mut stacked, "slurmstepd"),
            3,
            "stacked: sstat's read does"
        );
    }

    /// A figure is brought forward from the ledger's sample to the call at the power it
    /// published, unless energy plugins are stacked: Slurm then adds up each plugin's
    /// answers, and what was brought forward at a power that fell would stay counted.
    #[test]
    fn a_stacked_step_takes_the_ledgers_figure_as_it_is() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let procs = Procs::from_path(tmp.path());
        let load = || Ledger::load(&path).expect("ledger").expect("a ledger");
        let t = 1_000_000.0;
        let mut alone = StepFigure::from_path(&path, &procs, 1, false);
        let mut stacked = StepFigure::from_path(&path, &procs, 1, false).stacked();
        publish(&path, t - 100.0, t, 1000.0, 0.0);
        for step in [&mut alone, &mut stacked] {
            assert_eq!(step.count(&load(), t), Ok(0.0));
        }
        // sampled at 200 W, read half a second later
        publish(&path, t - 100.0, t + 1.0, 1200.0, 200.0);
        assert_eq!(alone.count(&load(), t + 1.5), Ok(200.0));
        assert_eq!(stacked.count(&load(), t + 1.5), Ok(200.0));
        assert_eq!(alone.total_uj(), 300_000_000);
        assert_eq!(stacked.total_uj(), 200_000_000);
    }

    /// A step that ends after slurmd died takes slurmd's last sample as it is (not brought
    /// forward at the last power) when that came after the step's last read, and keeps its
    /// figure when it did not.
    #[test]
    fn a_step_ending_after_slurmd_died_takes_its_last_sample() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let mut step = StepFigure::from_path(&path, &Procs::from_path(tmp.path()), 1, false);
        let load = || Ledger::load(&path).expect("ledger").expect("a ledger");
        let t = 1_000_000.0;
        publish(&path, t - 100.0, t, 1000.0, 300.0);
        assert_eq!(step.count(&load(), t), Ok(300.0));
        publish(&path, t - 100.0, t + 0.5, 1150.0, 300.0);
        assert_eq!(step.count(&load(), t + 0.5), Ok(300.0));
        assert_eq!(step.total_uj(), 150_000_000);
        // slurmd's last sample, 0.4 s after the step's last read; slurmd died then
        publish(&path, t - 100.0, t + 0.9, 1270.0, 300.0);
        assert!(step.count(&load(), t + 20.0).is_err(), "stale");
        assert_eq!(
            step.total_uj(),
            270_000_000,
            "its last sample, not 19 s more at 300 W"
        );
        // an older sample (a ledger restored from elsewhere) changes nothing
        publish(&path, t - 100.0, t + 0.2, 5000.0, 300.0);
        assert!(step.count(&load(), t + 30.0).is_err(), "stale");
        assert_eq!(step.total_uj(), 270_000_000);
    }

    /// In node mode a step's figure is the node's energy since its first reading, brought
    /// up to the call; a slurmd gone, a corrupt ledger or a new one never cost it what it
    /// had, and a ledger that never was gives no figure rather than 0 J.
    #[test]
    fn a_step_reads_the_node_since_it_began_and_keeps_its_figure_through_trouble() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let mut step = StepFigure::from_path(&path, &Procs::from_path(tmp.path()), 1, false);
        let first = step.read(Instant::now());
        assert!(!first.complete, "no ledger: unavailable");
        let epoch = unix_now() - 100.0;
        let now = unix_now();
        // the ledger sampled 0.5 s ago at 1000 J, 200 W: the step began at ~1100 J
        publish(&path, epoch, now - 0.5, 1000.0, 200.0);
        let start = step.read(Instant::now());
        assert!(start.complete);
        assert!(start.energy_uj < 1_000_000, "{}", start.energy_uj);
        let now = unix_now();
        publish(&path, epoch, now, 1900.0, 300.0);
        let counted_at = Instant::now();
        let reading = step.read(counted_at);
        let figure = reading.energy_uj as f64 / 1e6;
        assert!((figure - 800.0).abs() < 1.0, "{figure}");
        // the node's parts, for the profile
        assert_eq!(
            reading.sensors,
            vec![SensorReading {
                label: "Accel0",
                energy_uj: Some(950_000_000),
                watts: None
            }]
        );
        // corrupt: the figure stays
        fs::write(&path, "{\"version\": 2, \"jo").expect("corrupt");
        let kept = step.read(Instant::now());
        assert!(kept.complete && kept.watts.is_none());
        assert!((kept.energy_uj as f64 / 1e6 - figure).abs() < 1.0);
        // stale (slurmd gone for 20 s): the figure stays
        let now = unix_now();
        publish(&path, epoch, now - 20.0, 5000.0, 300.0);
        assert!((step.read(Instant::now()).energy_uj as f64 / 1e6 - figure).abs() < 1.0);
        // a new ledger begun 2 s from now, 50 J into it: kept + 2 s at 300 W + 50 J, and
        // the time the test itself took since the last read it counted, at 300 W
        let now = unix_now();
        publish(&path, now + 2.0, now + 2.0, 50.0, 100.0);
        let test_took = counted_at.elapsed().as_secs_f64() * 300.0;
        let after = step.read(Instant::now()).energy_uj as f64 / 1e6;
        let least = figure + 600.0 + 50.0;
        assert!(
            after >= least - 1.0 && after <= least + test_took + 1.0,
            "{after} vs {figure}"
        );
    }

    /// The attribution cost per sample in steady state (counters read, model, ledger
    /// written) with 1, 16, 64 and 256 one-CPU jobs of two steps each over a faithful v1 tree,
    /// their slurmstepds among 500 other processes (found at the first sample only):
    /// `cargo test --release -p slurm-energy-logic --lib attribution_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn attribution_cost_per_sample() {
        for jobs in [1u32, 16, 64, 256] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
            let proc_root = tmp.path().join("proc");
            fs::create_dir_all(&spool).expect("spool");
            for pid in 1..=500 {
                procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
            }
            let mut sockets = Vec::new();
            for job in 1..=jobs {
                let cpu = (job - 1).to_string();
                let steps = [("step_extern", 0), ("step_batch", 1000)];
                let dir =
                    cgroup::tests::v1_tree(&cgroups, "slurm", job, &cpu, u64::MAX, 1000, &steps);
                for (k, step) in [StepId::EXTERN, StepId::BATCH].into_iter().enumerate() {
                    let name = format!("n1_{job}.{}", step.0);
                    sockets.push(UnixListener::bind(spool.join(name)).expect("socket"));
                    let pid = 1000 + 2 * job + k as u32;
                    let stepd = cgroup::tests::v1_stepd(&dir, &step.cgroup_name(), true);
                    let socket = spool.join(format!("n1_{job}.{}", step.0));
                    procs::tests::stepd(&proc_root, pid, (job, step), &stepd, &socket);
                }
            }
            let site = Site {
                spool,
                cgroup_root: cgroups,
                proc_root,
            };
            let mut keeper = Keeper::shared(&site, 0, None).expect("keeper");
            let (t0, w0) = (Instant::now(), SystemTime::now());
            let mut accounting = Accounting::new(w0);
            let rounds = 200u32;
            let mut started = Instant::now();
            for k in 0..=rounds {
                if k == 1 {
                    assert!(
                        keeper
                            .places
                            .values()
                            .all(|p| matches!(p, Place::Found(..)))
                    );
                    started = Instant::now();
                }
                let at = Duration::from_secs(u64::from(k));
                let reading = Reading {
                    energy_uj: u64::from(k) * 300_000_000,
                    complete: true,
                    ..Reading::default()
                };
                accounting.record(&reading, t0 + at, w0 + at);
                keeper.pace = Arc::default();
                keeper.on_sample(&accounting, &Reading::default());
            }
            let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            // the part of it that finds the jobs and reads their cgroups
            let started = Instant::now();
            for _ in 0..rounds {
                assert_eq!(keeper.observe(&[]).len(), jobs as usize);
            }
            let observe = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            // the same with the Prometheus metrics file written at each sample
            let file = tmp.path().join("slurm_energy.prom");
            let readable = crate::replace::Access {
                mode: 0o644,
                group: None,
            };
            let who = crate::metrics::Identity {
                node: "n1".into(),
                source: "rust_rapl".into(),
                attribution: keeper.attribution().into(),
            };
            let mut metrics = crate::metrics::MetricsFile::new(file.clone(), readable, true);
            let mut keeper = keeper.publishing(
                true,
                Box::new(move |ledger, owners| {
                    metrics.write(&crate::metrics::render(ledger, owners, &who));
                }),
            );
            let started = Instant::now();
            for k in rounds + 1..=2 * rounds {
                let at = Duration::from_secs(u64::from(k));
                let reading = Reading {
                    energy_uj: u64::from(k) * 300_000_000,
                    complete: true,
                    ..Reading::default()
                };
                accounting.record(&reading, t0 + at, w0 + at);
                keeper.pace = Arc::default();
                keeper.on_sample(&accounting, &Reading::default());
            }
            let with_metrics = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            let bytes = fs::metadata(&file).map_or(0, |m| m.len());
            println!(
                "{jobs} jobs: {us:.0} us per sample ({:.1} us per job), of which steps and \
                 cgroups read {observe:.0} us ({:.1} us per job); with the metrics file \
                 ({bytes} bytes) {with_metrics:.0} us",
                us / f64::from(jobs),
                observe / f64::from(jobs)
            );
        }
    }

    /// The GPU attribution cost per sample in steady state (steps found, their GPUs known,
    /// each GPU's processes' use charged per job, ledger written) with 1, 16, 64 and 256 jobs
    /// sharing 8 GPUs by shards, each with a process using its GPU, among 500 other
    /// processes: `cargo test --release -p slurm-energy-logic --lib gpu_attribution_cost --
    /// --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn gpu_attribution_cost_per_sample() {
        use crate::source::DeviceReading;
        for jobs in [1u32, 16, 64, 256] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let (spool, proc_root) = (tmp.path().join("spool"), tmp.path().join("proc"));
            fs::create_dir_all(&spool).expect("spool");
            for pid in 1..=500 {
                procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
            }
            let mut sockets = Vec::new();
            for job in 1..=jobs {
                sockets
                    .push(UnixListener::bind(spool.join(format!("n1_{job}.0"))).expect("socket"));
                let (stepd, task) = (10_000 + 2 * job, 10_001 + 2 * job);
                let job_dir = format!("0::/system.slice/slurmstepd.scope/job_{job}");
                let socket = spool.join(format!("n1_{job}.0"));
                let cgroup = format!("{job_dir}/step_0/slurm\n");
                procs::tests::stepd(&proc_root, stepd, (job, StepId(0)), &cgroup, &socket);
                let task_cgroup = format!("{job_dir}/step_0/user/task_0\n");
                procs::tests::process(&proc_root, task, "python", &task_cgroup);
                grant::tests::shards(job, StepId(0), 2, job % 8)
                    .publish(&spool)
                    .expect("grant");
            }
            let mut keeper =
                Keeper::devices(&spool, 0, GresOrder::Detected, Some(60.0), &proc_root)
                    .expect("keeper");
            let (t0, w0) = (Instant::now(), SystemTime::now());
            let mut accounting = Accounting::new(w0);
            let rounds = 200u32;
            let mut started = Instant::now();
            for k in 0..=rounds {
                if k == 1 {
                    started = Instant::now();
                }
                let devices: Vec<DeviceReading> = (0..8u32)
                    .map(|gpu| DeviceReading {
                        position: gpu,
                        file: Some((195, gpu)),
                        energy_uj: u64::from(k) * 300_000_000,
                        watts: Some(300.0),
                        busy: (1..=jobs)
                            .filter(|job| job % 8 == gpu)
                            .map(|job| (10_001 + 2 * job, u64::from(k) * u64::from(job)))
                            .collect(),
                        instances: vec![],
                    })
                    .collect();
                let at = Duration::from_secs(u64::from(k));
                let reading = Reading {
                    energy_uj: u64::from(k) * 2_400_000_000,
                    complete: true,
                    ..Reading::default()
                };
                accounting.record(&reading, t0 + at, w0 + at);
                keeper.pace = Arc::default();
                keeper.on_sample(&accounting, &Reading { devices, ..reading });
            }
            let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
            let charged = (1..=jobs)
                .filter(|job| {
                    keeper
                        .ledger
                        .step(*job, StepId(0))
                        .is_some_and(|a| a.joules > 0.0)
                })
                .count();
            assert_eq!(charged, jobs as usize, "every job holds its GPU");
            println!(
                "{jobs} jobs on 8 GPUs: {us:.0} us per sample ({:.1} us per job)",
                us / f64::from(jobs)
            );
        }
    }

    /// One sample of `keeper`, whatever the time since the last.
    fn tick(keeper: &mut Keeper) {
        let (t, w) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w);
        let reading = Reading {
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading, t, w);
        keeper.pace = Arc::default();
        keeper.on_sample(&accounting, &Reading::default());
    }

    fn found(keeper: &mut Keeper, job: u32, step: StepId) -> Option<&mut StepCgroup> {
        match keeper.places.get_mut(&(job, step)) {
            Some(Place::Found(_, cgroup)) => Some(cgroup),
            _ => None,
        }
    }

    /// A node's spool dir, cgroup mount and /proc in a temp dir.
    struct Node {
        tmp: tempfile::TempDir,
        site: Site,
        sockets: HashMap<(u32, StepId), UnixListener>,
    }

    impl Node {
        fn new(mount: &str) -> Self {
            let tmp = tempfile::tempdir().expect("tempdir");
            let site = Site {
                spool: tmp.path().join("spool/n1"),
                cgroup_root: tmp.path().join(mount),
                proc_root: tmp.path().join("proc"),
            };
            fs::create_dir_all(&site.spool).expect("spool");
            Self {
                tmp,
                site,
                sockets: HashMap::new(),
            }
        }

        /// slurmd starts a step: its socket, its slurmstepd at `pid` in `cgroup`.
        fn start(&mut self, job: u32, step: StepId, pid: u32, cgroup: &str) {
            let name = format!("n1_{job}.{}", step.0);
            let socket = UnixListener::bind(self.site.spool.join(name)).expect("socket");
            self.sockets.insert((job, step), socket);
            let socket = self.site.spool.join(format!("n1_{job}.{}", step.0));
            procs::tests::stepd(&self.site.proc_root, pid, (job, step), cgroup, &socket);
        }

        fn moves(&self, pid: u32, cgroup: &str) {
            cgroup::tests::write(&self.site.proc_root.join(format!("{pid}/cgroup")), cgroup);
        }

        fn ends(&mut self, job: u32, step: StepId, pid: u32) {
            self.sockets.remove(&(job, step));
            fs::remove_file(self.site.spool.join(format!("n1_{job}.{}", step.0))).expect("rm");
            fs::remove_dir_all(self.site.proc_root.join(pid.to_string())).expect("rm");
        }

        fn keeper(&self) -> Keeper {
            Keeper::shared(&self.site, 0, None).expect("keeper")
        }
    }

    /// Each release's cgroup/v2 layout: the job's directory under the mount, found from
    /// where the slurmstepd sits once it leaves the scope's `system/`, and kept.
    #[test]
    fn v2_steps_are_found_where_their_slurmstepd_runs_in_every_release() {
        let layouts = [
            // 22.05 to 25.05, and 26.05 with CgroupJobIdPaths=yes
            "system.slice/slurmstepd.scope/job_7",
            // 24.11 and later rooted at init's cgroup, in a container sharing the host's
            "kubepods.slice/pod1/system.slice/slurmstepd.scope/job_7",
            // 25.11 and later with CgroupSlice=slurm.slice
            "slurm.slice/slurmstepd.scope/job_7",
            // 26.05's default: the job's SLUID
            "system.slice/slurmstepd.scope/sEKNKTV3WPV500",
            // a multiple-slurmd build
            "system.slice/n1_slurmstepd.scope/job_7",
        ];
        for job_dir in layouts {
            let mut node = Node::new("sys/fs/cgroup");
            let mount = node.site.cgroup_root.clone();
            let steps = [("step_extern", 10), ("step_0", 1_000)];
            cgroup::tests::v2_tree(&mount, job_dir, "0-1", "1073741824", 1_010, &steps);
            let scope = Path::new(job_dir)
                .parent()
                .expect("scope")
                .display()
                .to_string();
            let parked = format!(
                "0::/{scope}/system
"
            );
            node.start(7, StepId(0), 300, &parked);
            let mut keeper = node.keeper();
            tick(&mut keeper);
            assert_eq!(keeper.places.get(&(7, StepId(0))), Some(&Place::Stepd(300)));
            node.moves(
                300,
                &format!(
                    "0::/{job_dir}/step_0/slurm
"
                ),
            );
            tick(&mut keeper);
            let step = found(&mut keeper, 7, StepId(0)).expect(job_dir);
            assert_eq!(step.job, Path::new(job_dir));
            assert_eq!(step.step_usage_ns(), Some(1_000_000), "{job_dir}");
            assert_eq!(
                step.job_counters(),
                Some(cgroup::JobCounters {
                    cpus: 2,
                    memory: Some(1 << 30),
                    usage_ns: 1_010_000
                }),
                "{job_dir}"
            );
            // kept: no /proc read once found
            fs::remove_dir_all(node.site.proc_root.join("300")).expect("rm");
            tick(&mut keeper);
            assert!(found(&mut keeper, 7, StepId(0)).is_some(), "{job_dir}");
            // and dropped with the step
            node.sockets.clear();
            fs::remove_file(node.site.spool.join("n1_7.0")).expect("rm");
            tick(&mut keeper);
            assert!(keeper.places.is_empty(), "{job_dir}");
        }
    }

    /// Several slurmd on one host run a slurmstepd each for a step of a job that spans
    /// their nodes: this node's is the one holding this node's socket.
    #[test]
    fn with_several_slurmd_on_a_host_the_step_is_this_nodes() {
        let mut node = Node::new("sys/fs/cgroup");
        let mount = node.site.cgroup_root.clone();
        let (ours, theirs) = (
            "system.slice/n1_slurmstepd.scope/job_9",
            "system.slice/n2_slurmstepd.scope/job_9",
        );
        cgroup::tests::v2_tree(&mount, ours, "0", "max", 100, &[("step_0", 50)]);
        cgroup::tests::v2_tree(&mount, theirs, "1-3", "max", 900, &[("step_0", 800)]);
        procs::tests::process(
            &node.site.proc_root,
            400,
            "slurmstepd: [9.0]",
            &format!(
                "0::/{theirs}/step_0/slurm
"
            ),
        );
        node.start(
            9,
            StepId(0),
            401,
            &format!(
                "0::/{ours}/step_0/slurm
"
            ),
        );
        let proc_root = node.site.proc_root.clone();
        let socket = |n: &str| node.tmp.path().join(format!("spool/{n}/{n}_9.0"));
        procs::tests::holds_socket(&proc_root, 400, &socket("n2"), 7001);
        procs::tests::holds_socket(&proc_root, 401, &socket("n1"), 7002);
        let mut keeper = node.keeper();
        tick(&mut keeper);
        let step = found(&mut keeper, 9, StepId(0)).expect("step");
        assert_eq!(step.job, Path::new(ours));
        assert_eq!(step.step_usage_ns(), Some(50_000));
    }

    /// cgroup/v1 in every release (22.05 to 26.05 alike), the mount from cgroup.conf.
    #[test]
    fn v1_steps_are_found_where_their_slurmstepd_or_tasks_run() {
        let conf = "# site\nCgroupPlugin=cgroup/v1\ncgroupmountpoint = /cgroup # ours\n";
        assert_eq!(cgroup_mountpoint(conf), Path::new("/cgroup"));
        assert_eq!(
            cgroup_mountpoint("CgroupPlugin=autodetect\n"),
            Path::new(CGROUP_ROOT)
        );
        // multiple-slurmd builds prefix `slurm_<node>`
        for slurm in ["slurm", "slurm_n1"] {
            let mut node = Node::new("cgroup");
            let mount = node.site.cgroup_root.clone();
            let steps = [("step_batch", 4_000), ("step_0", 2_000)];
            let job = cgroup::tests::v1_tree(&mount, slurm, 5, "0-3", 1 << 30, 6_000, &steps);
            // ConstrainCores: the slurmstepd is in the step's cpuset
            let constrained = cgroup::tests::v1_stepd(&job, "step_batch", true);
            node.start(5, StepId::BATCH, 500, &constrained);
            // no constraint: only its task shows the step
            node.start(
                5,
                StepId(0),
                501,
                &cgroup::tests::v1_stepd(&job, "step_0", false),
            );
            let mut keeper = node.keeper();
            tick(&mut keeper);
            assert!(found(&mut keeper, 5, StepId::BATCH).is_some(), "{slurm}");
            assert_eq!(keeper.places.get(&(5, StepId(0))), Some(&Place::Stepd(501)));
            let task = cgroup::tests::v1_task(&job, "step_0");
            procs::tests::process(&node.site.proc_root, 502, "/bin/sh job.sh", &task);
            procs::tests::child(&node.site.proc_root, 501, 502);
            tick(&mut keeper);
            let step = found(&mut keeper, 5, StepId(0)).expect("step 0");
            assert_eq!(step.job, Path::new(&job[1..]));
            assert_eq!(step.step_usage_ns(), Some(2_000));
            assert_eq!(
                step.job_counters(),
                Some(cgroup::JobCounters {
                    cpus: 4,
                    memory: Some(1 << 30),
                    usage_ns: 6_000
                })
            );
            node.ends(5, StepId(0), 501);
            tick(&mut keeper);
            assert_eq!(keeper.places.len(), 1, "{slurm}");
        }
    }

    /// A step whose slurmstepd is not found is searched for at every sample while its
    /// socket is young (a new slurmstepd a loaded node has not titled yet: its job has no
    /// share until found), then less and less often (a stale socket).
    #[test]
    fn an_unseen_step_is_searched_for_at_every_sample_while_young_then_less_often() {
        let node = Node::new("cgroup");
        cgroup::tests::v1_tree(&node.site.cgroup_root, "slurm", 3, "0", 1 << 30, 0, &[]);
        let socket = node.site.spool.join("n1_3.0");
        let _listener = UnixListener::bind(&socket).expect("socket");
        let mut keeper = node.keeper();
        let mut searched = Vec::new();
        for sample in 0..40 {
            if sample == 20 {
                let old = nix::sys::time::TimeSpec::new(
                    (SystemTime::now() - 2 * YOUNG_SOCKET)
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("after 1970")
                        .as_secs() as i64,
                    0,
                );
                nix::sys::stat::utimensat(
                    nix::fcntl::AT_FDCWD,
                    &socket,
                    &old,
                    &old,
                    nix::sys::stat::UtimensatFlags::NoFollowSymlink,
                )
                .expect("age the socket");
            }
            let before = keeper.places.get(&(3, StepId(0))).cloned();
            tick(&mut keeper);
            if keeper.places.get(&(3, StepId(0))) != before.as_ref() {
                searched.push(sample);
            }
        }
        let mut expected: Vec<u64> = (0..20).collect();
        expected.extend([20, 22, 26, 34]);
        assert_eq!(searched, expected);
    }

    /// A job's owner can title a process as any step's slurmstepd (`exec -a`): it is not
    /// taken for one unless it runs as slurmd's user and holds the step's socket.
    #[test]
    fn a_process_titled_as_a_slurmstepd_is_not_taken_for_one() {
        let node = Node::new("cgroup");
        let job = cgroup::tests::v1_tree(&node.site.cgroup_root, "slurm", 3, "0", 1 << 30, 0, &[]);
        let socket = node.site.spool.join("n1_3.0");
        let _listener = UnixListener::bind(&socket).expect("socket");
        let root = &node.site.proc_root;
        let task = format!("4:cpuset:/{job}/step_0/task_0\n");
        // the user's process, as another uid; and one of slurmd's uid not holding it
        procs::tests::process_of(root, 900, "slurmstepd: [3.0]", &task, 4242);
        procs::tests::process(root, 901, "slurmstepd: [3.0]", &task);
        let mut keeper = node.keeper();
        tick(&mut keeper);
        assert!(matches!(
            keeper.places.get(&(3, StepId(0))),
            Some(Place::Unseen { .. })
        ));
        assert!(keeper.starts.contains_key(&(3, StepId(0))));
        // the step's own slurmstepd, holding its socket, is found
        procs::tests::stepd(root, 902, (3, StepId(0)), "0::/\n", &socket);
        tick(&mut keeper);
        assert_eq!(
            keeper.places.get(&(3, StepId(0))).and_then(Place::stepd),
            Some(902)
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

    #[test]
    fn without_cgroups_the_keeper_says_what_is_missing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let site = Site {
            spool: tmp.path().to_path_buf(),
            cgroup_root: tmp.path().join("nothing"),
            proc_root: tmp.path().join("proc"),
        };
        let e = Keeper::shared(&site, 0, None).err().expect("error");
        assert!(e.contains("cgroup"), "{e}");
    }
}
