//! slurmd's side of the ledger: at each sample of the node's meter, the steps present and
//! what they use, the node's energy split among them, the ledger written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::ask::Book;
use super::doorbell::Pace;
use super::slots::Table;
use super::{Ledger, Observation, ObservedJob, ObservedStep, Part, Split, ledger_path};
use crate::accounting::Accounting;
use crate::attribution::cgroup::{CgroupTree, StepCgroup};
use crate::attribution::grant::{self, Owner};
use crate::attribution::gres::GresOrder;
use crate::attribution::holders::{Holders, ObservedDevice};
use crate::attribution::owner_time::{OwnerSample, OwnerTime};
use crate::attribution::procs::{self, Procs};
use crate::attribution::{Site, StepId, present_steps};
use crate::source::{DeviceReading, Reading};

/// The ledger is updated at the meter's samples (every second or faster), at most this
/// often; it is a sample period (about a second) old at most.
const LEDGER_INTERVAL: Duration = Duration::from_millis(500);
/// How often the ledger file is written at most, unless a step of before rings for it:
/// steps ask slurmd for their figures ([`super::ask`]); the file is what a slurmd started
/// again continues from (the hardware's counts bridge the time since, whatever the file's
/// age) and what a step reads while slurmd does not answer. Under the staleness a step of
/// before allows a ledger ([`crate::source::stale_after`] of [`super::LEDGER_PERIOD`]).
const STORE_INTERVAL: Duration = Duration::from_secs(5);
/// Ended steps' grants are swept at every this many ledger updates (about a minute).
const GRANT_SWEEP_SAMPLES: u64 = 60;

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
    Found(u32, Box<StepCgroup>),
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
    /// The present steps whose slurmstepd made its last read:
    /// charged no more, nor their job once its extern step's is made (`Ring::Last`).
    ended: HashSet<(u32, StepId)>,
    /// When each present step's slurmstepd started (its process's start once found, its
    /// socket's time until then).
    starts: HashMap<(u32, StepId), Option<SystemTime>>,
    /// Samples taken, the clock of [`Place::Unseen`].
    samples: u64,
    /// The searches of /proc for slurmstepds, [`procs::SCAN_GAP`] apart at least.
    scans: procs::Scans,
    spool: PathBuf,
    path: PathBuf,
    /// When the ledger was last updated, and whether a step asked for a fresh one
    /// ([`doorbell`]): the next sample updates it as the pace of rings allows, however
    /// often steps ring.
    pace: Arc<Pace>,
    /// What steps' questions are answered from, kept at each update ([`super::ask`]).
    book: Arc<Book>,
    /// The slots file, for the steps' periodic polls, written at each update
    /// ([`super::slots`]), and whether its last write failed (said once per episode).
    slots: Table,
    slots_failing: bool,
    /// When the ledger file was last written (the sample's time): it is what a slurmd
    /// started again continues from, and what a step reads when slurmd does not answer,
    /// so it is written every [`STORE_INTERVAL`], not at each update.
    stored: Option<Instant>,
    /// Whether a step rang the doorbell the way of before since the file was written: it
    /// waits for the file ([`super::doorbell::freshen`]), which the next update writes.
    file_wanted: bool,
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
    /// CPU time jobs' owners moved out of their jobs' directories, given back to them.
    owner_time: OwnerTime,
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
            ended: HashSet::new(),
            starts: HashMap::new(),
            samples: 0,
            scans: procs::Scans::default(),
            spool: spool.to_path_buf(),
            path,
            pace: Arc::default(),
            book: Arc::default(),
            slots: Table::new(&ledger_path(spool, context_id)),
            slots_failing: false,
            stored: None,
            file_wanted: false,
            failing: false,
            publish: None,
            publish_owners: false,
            owners: HashMap::new(),
            stepd_uid: nix::unistd::getuid().as_raw(),
            owner_time: OwnerTime::default(),
        })
    }

    /// How jobs are charged, as the metrics label it: `node`, `shared` or `devices`.
    pub fn attribution(&self) -> &'static str {
        self.split.name()
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

    /// What steps' questions are answered from.
    pub fn book(&self) -> Arc<Book> {
        Arc::clone(&self.book)
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
        self.ledger.update(&observation, self.split);
        self.samples += 1;
        // charged up to this update, which answers their last read
        let last_reads = self.pace.take_last_reads();
        if !last_reads.is_empty() {
            let ended = self
                .places
                .iter()
                .filter(|(_, place)| place.stepd().is_some_and(|pid| last_reads.contains(&pid)));
            self.ended.extend(ended.map(|(step, _)| *step));
        }
        if self.pace.take_file_wanted() {
            self.file_wanted = true;
        }
        if self.file_wanted
            || self
                .stored
                .is_none_or(|t| point.at.saturating_duration_since(t) >= STORE_INTERVAL)
        {
            self.store(point.at);
        }
        if let Some(publish) = &mut self.publish {
            let kept: HashSet<u32> = self.ledger.jobs().map(|j| j.id).collect();
            self.owners.retain(|job, _| kept.contains(job));
            publish(&self.ledger, self.publish_owners.then_some(&self.owners));
        }
        // the questions asked before this sample's reading are answered by it
        self.book.update(&self.ledger, point.at);
        match self.slots.write(&self.ledger) {
            Ok(()) => self.slots_failing = false,
            Err(e) if !self.slots_failing => {
                log::error!("{e}; steps ask slurmd for their figures at every poll");
                self.slots_failing = true;
            }
            Err(_) => {}
        }
    }

    /// Writes the ledger file; a failure is logged once per episode.
    fn store(&mut self, at: Instant) {
        self.stored = Some(at);
        self.file_wanted = false;
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
        let done: HashSet<u32> = self
            .ended
            .iter()
            .filter(|(_, step)| *step == StepId::EXTERN)
            .map(|(job, _)| *job)
            .collect();
        let mut jobs: Vec<ObservedJob> = Vec::new();
        // jobs whose owner owns their step directories, with their owner's CPU time
        let mut owned = Vec::new();
        for &(job, step) in present.keys() {
            if done.contains(&job) || self.ended.contains(&(job, step)) {
                continue;
            }
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
                    // its owner's directory after it: see owner_time
                    if let (Some(counters), Some(c)) = (j.counters, cgroup.as_mut())
                        && let Some((dir, owner_ns)) = c.user_usage_ns()
                    {
                        owned.push((
                            job,
                            counters.cpus,
                            counters.usage_ns,
                            dir.to_path_buf(),
                            owner_ns,
                        ));
                    }
                }
                // the extern step is charged its job's share whatever its own CPU time
                let usage_ns = match step {
                    StepId::EXTERN => None,
                    _ => cgroup.and_then(|c| c.step_usage_ns()),
                };
                j.steps.push(ObservedStep {
                    id: step,
                    usage_ns,
                    started: self.starts.get(&(job, step)).copied().flatten(),
                    holds,
                });
            }
        }
        self.give_back_owner_time(&mut jobs, &owned);
        jobs
    }

    /// Adds to each job whose owner owns its step directories the CPU time its owner's
    /// processes spent out of its owner's present jobs' directories ([`OwnerTime`]).
    fn give_back_owner_time(
        &mut self,
        jobs: &mut [ObservedJob],
        owned: &[(u32, u32, u64, PathBuf, u64)],
    ) {
        let samples: Vec<OwnerSample> = owned
            .iter()
            .map(|(job, cpus, job_ns, dir, owner_ns)| OwnerSample {
                job: *job,
                cpus: *cpus,
                job_ns: *job_ns,
                owner: (dir.as_path(), *owner_ns),
            })
            .collect();
        let credit = self.owner_time.credit(&samples);
        for j in jobs {
            if let (Some(counters), Some(ns)) = (j.counters.as_mut(), credit.get(&j.job)) {
                counters.usage_ns = counters.usage_ns.saturating_add(*ns);
            }
        }
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
    /// /proc once for the slurmstepds of those not seen yet (where a search may be made:
    /// [`procs::Scans`]), and reads the cgroup of each slurmstepd found whose step has none
    /// yet.
    fn locate(&mut self, present: &BTreeMap<(u32, StepId), PathBuf>) {
        let now = self.samples;
        self.places.retain(|step, _| present.contains_key(step));
        self.ended.retain(|step| present.contains_key(step));
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
        // at most one pass over /proc per SCAN_GAP, however many steps start: the steps
        // of a sample that may not search wait for the next that may
        let wanted: HashMap<(u32, StepId), &Path> =
            search.iter().map(|s| (*s, present[s].as_path())).collect();
        let found = match wanted.is_empty() {
            true => None,
            false => self.scans.stepds(&self.procs, &wanted, self.stepd_uid),
        };
        if let Some(mut stepds) = found {
            for step in search {
                let pid = stepds.remove(&step);
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
                    Some(Some(cgroup)) => *place = Place::Found(pid, Box::new(cgroup)),
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

/// The step's cgroup from where its slurmstepd is (never a task's: see
/// [`CgroupTree::step_cgroup`]); `None` when the slurmstepd is gone.
impl Drop for Keeper {
    /// slurmd stops: the file is what it continues from when it starts again.
    fn drop(&mut self) {
        if let Some(at) = self.stored {
            self.store(at);
        }
    }
}

fn step_cgroup(
    tree: &CgroupTree,
    procs: &Procs,
    stepd: u32,
    step: StepId,
) -> Option<Option<StepCgroup>> {
    Some(tree.step_cgroup(&procs.cgroup(stepd)?, step))
}

#[cfg(test)]
mod tests;
