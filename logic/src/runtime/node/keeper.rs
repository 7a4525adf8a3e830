//! slurmd's side of the ledger: at each sample of the node's meter, what the steps present
//! use (the steps found by [`crate::attribution::steps`]), the node's energy split among
//! them, the ledger written and published.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accounting::Accounting;
use crate::attribution::cgroup::{CgroupTree, usage_ns_at};
use crate::attribution::grant::Owner;
use crate::attribution::gres::GresOrder;
use crate::attribution::holders::{Holders, ObservedDevice};
use crate::attribution::owner_time::{OwnerSample, OwnerTime};
use crate::attribution::procs;
use crate::attribution::steps::{Present, Step, Steps};
use crate::attribution::{Site, StepId, StepKey};
use crate::exchange::ask::Book;
use crate::exchange::doorbell::Pace;
use crate::exchange::{Publisher, Sink};
use crate::ledger::{Ledger, Observation, ObservedJob, ObservedStep, Part, Split, ledger_path};
use crate::source::{DeviceReading, Reading};

/// The ledger is updated at the meter's samples (every second or faster), at most this
/// often unless a step asks; it is a sample period (about a second) old at most.
const LEDGER_INTERVAL: Duration = Duration::from_millis(500);

/// slurmd's side: updates and publishes the ledger at the meter's samples.
pub(crate) struct Keeper {
    /// Shared with the writer's thread until it has written it: the next update copies it
    /// only if the thread is still at it (`Arc::make_mut`), so a sample seldom does.
    ledger: Arc<Ledger>,
    split: Split,
    /// The node's steps and where they run; their cgroups are read in shared mode only
    /// (in node mode the ledger keeps the node's account).
    steps: Steps,
    /// Who holds the node's devices, in [`Split::Devices`].
    holders: Option<Holders>,
    /// The present steps whose slurmstepd made its last read:
    /// charged no more, nor their job once its extern step's is made (`Ring::Last`).
    ended: HashSet<StepKey>,
    path: PathBuf,
    /// Whether this keeper updated the ledger yet: one that never did leaves the file as
    /// it was when slurmd stops.
    updated: bool,
    /// How often the ledger is updated at most unless a step asks ([`LEDGER_INTERVAL`];
    /// the benchmarks update at every sample, which they time).
    interval: Duration,
    /// Hands each update to the node's steps, and paces the updates they ask for.
    publisher: Publisher,
    /// Whether the publisher is told who runs each job ([`Self::owners`]).
    publish_owners: bool,
    /// Who runs each job, learned from Slurm's step records for the publisher.
    owners: HashMap<u32, Owner>,
    /// CPU time jobs' owners moved out of their jobs' directories, given back to them.
    owner_time: OwnerTime,
}

impl Keeper {
    /// `EnergyAttribution=shared`: splits the node among the jobs of `site`, at the static
    /// power `idle_watts` (learned when `None`). An error says what is missing.
    pub(crate) fn shared(
        site: &Site,
        context_id: u16,
        idle_watts: Option<f64>,
    ) -> Result<Self, String> {
        let tree = CgroupTree::from_path(&site.cgroup_root).map_err(|e| e.to_string())?;
        let mut keeper = Self::node(&site.spool, context_id)?;
        keeper.split = Split::Shared { idle_watts };
        keeper.steps = Steps::new(&site.spool, Some(tree), &site.proc_root);
        Ok(keeper)
    }

    /// A source of devices Slurm allocates (rust_gpu): each job is charged the devices
    /// it holds by `order` (shared ones split, `idle_watts` static power each, learned when
    /// `None`), whatever `EnergyAttribution` says. An error says what is missing.
    pub(crate) fn devices(
        spool: &Path,
        context_id: u16,
        order: GresOrder,
        idle_watts: Option<f64>,
        proc_root: &Path,
    ) -> Result<Self, String> {
        let mut keeper = Self::node(spool, context_id)?;
        keeper.split = Split::Devices { idle_watts };
        keeper.holders = Some(Holders::new(order, spool));
        keeper.steps = Steps::new(spool, None, proc_root);
        Ok(keeper)
    }

    /// `EnergyAttribution=node`: the ledger keeps the node's account, from which each step
    /// takes the node's energy since it began. Continues the ledger in the spool dir, if
    /// any; an error says what is missing.
    pub(crate) fn node(spool: &Path, context_id: u16) -> Result<Self, String> {
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
            ledger: Arc::new(ledger),
            split: Split::Node,
            steps: Steps::new(spool, None, Path::new(procs::PROC_ROOT)),
            holders: None,
            ended: HashSet::new(),
            publisher: Publisher::new(&path),
            path,
            updated: false,
            interval: LEDGER_INTERVAL,
            publish_owners: false,
            owners: HashMap::new(),
            owner_time: OwnerTime::default(),
        })
    }

    /// How jobs are charged, as the metrics label it: `node`, `shared` or `devices`.
    pub(crate) fn attribution(&self) -> &'static str {
        self.split.name()
    }

    /// Also hands the ledger to `publish` at each update (the metrics file), with who runs
    /// each job if `owners`.
    pub(crate) fn publishing(mut self, owners: bool, publish: Sink) -> Self {
        self.publisher.sinking(publish);
        self.publish_owners = owners;
        self
    }

    /// Writes the ledger file in a thread of its own, off slurmd's samples (slurmd's
    /// pipeline; without it each update writes the file before it returns).
    pub(crate) fn writing_off_the_sample(mut self) -> Self {
        self.publisher.off_the_sample();
        self
    }

    /// Says in the ledger what the node's meter reads, for whoever inspects the node.
    pub(crate) fn describe_source(&mut self, source: String) {
        Arc::make_mut(&mut self.ledger).describe_source(source);
    }

    /// The ledger file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Told by the doorbell that a step asks for a fresh ledger; paces the updates.
    pub(crate) fn pace(&self) -> Arc<Pace> {
        Arc::clone(self.publisher.pace())
    }

    /// What steps' questions are answered from.
    pub(crate) fn book(&self) -> Arc<Book> {
        Arc::clone(self.publisher.book())
    }

    /// Takes the node's energy at a sample of its meter (`accounting`, of `reading`), and
    /// its devices'. Returns whether a step's ask still waits for a reading taken after it:
    /// the sampler then samples again within [`crate::exchange::doorbell::RESAMPLE`].
    pub(crate) fn on_sample(&mut self, accounting: &Accounting, reading: &Reading) -> bool {
        self.take_sample(accounting, reading);
        self.publisher.pace().awaits_newer_reading(Instant::now())
    }

    fn take_sample(&mut self, accounting: &Accounting, reading: &Reading) {
        let now = Instant::now();
        let Some(point) = accounting.fresh(now, Duration::MAX) else {
            return;
        };
        let devices = &reading.devices[..];
        if !self.publisher.pace().take(now, point.at, self.interval) {
            return;
        }
        // in every mode: node mode charges each job the node's energy since it began
        let (jobs, devices, unowned_cpu_ns) = self.observe(devices);
        let parts = accounting
            .part_records(now, Duration::MAX)
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
            unowned_cpu_ns,
            parts,
            devices,
            watts: accounting.measured_watts(),
        };
        Arc::make_mut(&mut self.ledger).update(&observation, self.split);
        // charged up to this update, which answers their last read
        let last_reads = self.publisher.pace().take_last_reads();
        if !last_reads.is_empty() {
            self.ended.extend(self.steps.run_by(&last_reads));
        }
        // handed over at every update: the publisher, where set, shows each
        let owners = self.publish_owners.then(|| {
            let kept: HashSet<u32> = self.ledger.jobs().map(|j| j.id).collect();
            self.owners.retain(|job, _| kept.contains(job));
            self.owners.clone()
        });
        self.publisher.publish(&self.ledger, owners, point.at);
        self.updated = true;
    }

    /// The present jobs and steps with their counters and the devices they hold, the
    /// devices' energy and their use per job since the last sample, and the CPU time of no
    /// job present since the last sample ([`OwnerTime`]).
    fn observe(
        &mut self,
        devices: &[DeviceReading],
    ) -> (Vec<ObservedJob>, Vec<ObservedDevice>, u64) {
        // a job's owner is looked up only where the publisher shows owners
        let owners = self.publish_owners.then_some(&mut self.owners);
        let mut present = self.steps.find(owners);
        self.ended.retain(|step| present.contains(step));
        if let Some(holders) = self.holders.as_mut() {
            holders.retain(&present.keys());
        }
        let (mut jobs, owned) =
            observe_jobs(&mut present, &self.ended, self.holders.as_mut(), devices);
        let unowned_ns = give_back_owner_time(&mut self.owner_time, &mut jobs, &owned);
        let devices = match self.holders.as_mut() {
            Some(holders) => holders.observe(present.procs, &present.stepds(), devices),
            None => Vec::new(),
        };
        (jobs, devices, unowned_ns)
    }
}

/// A job whose owner owns its step directories ([`OwnerTime`]).
struct Owned {
    job: u32,
    cpus: u32,
    /// The job's CPU time, ns.
    job_ns: u64,
    /// Its owner's directory, and the CPU time there, ns.
    owner_dir: PathBuf,
    owner_ns: u64,
}

/// The present jobs and steps not `ended` with their counters and the devices they hold
/// (by `holders`), and the jobs whose owner owns their step directories.
fn observe_jobs(
    present: &mut Present,
    ended: &HashSet<StepKey>,
    mut holders: Option<&mut Holders>,
    devices: &[DeviceReading],
) -> (Vec<ObservedJob>, Vec<Owned>) {
    let done: HashSet<u32> = ended
        .iter()
        .filter(|key| key.step == StepId::EXTERN)
        .map(|key| key.job)
        .collect();
    let mut jobs: Vec<ObservedJob> = Vec::new();
    // jobs whose owner owns their step directories, with their owner's CPU time
    let mut owned = Vec::new();
    for of_job in present.steps.chunk_by_mut(|a, b| a.key.job == b.key.job) {
        let job = of_job[0].key.job;
        if done.contains(&job) {
            continue;
        }
        let charged = |s: &&mut Step| !ended.contains(&s.key);
        let mut observed = ObservedJob {
            job,
            counters: None,
            steps: Vec::with_capacity(of_job.len()),
        };
        for found in of_job.iter_mut().filter(charged) {
            let key = found.key;
            let holds = match holders.as_mut() {
                Some(holders) => holders.holds(present.procs, key, devices),
                None => Vec::new(),
            };
            let mut cgroup = found.cgroup.as_deref_mut();
            // the job's directory is the parent of any of its steps': read it once
            if observed.counters.is_none() {
                observed.counters = cgroup.as_mut().and_then(|c| c.job_counters());
                // its owner's directory after it: see owner_time
                if let (Some(counters), Some(c)) = (observed.counters, cgroup.as_mut())
                    && let Some((dir, owner_ns)) = c.user_usage_ns()
                {
                    owned.push(Owned {
                        job,
                        cpus: counters.cpus,
                        job_ns: counters.usage_ns,
                        owner_dir: dir.to_path_buf(),
                        owner_ns,
                    });
                }
            }
            // the extern step is charged its job's share whatever its own CPU time
            let usage_ns = match key.step {
                StepId::EXTERN => None,
                _ => cgroup.and_then(|c| c.step_usage_ns()),
            };
            observed.steps.push(ObservedStep {
                id: key.step,
                usage_ns,
                started: found.started,
                holds,
            });
        }
        if !observed.steps.is_empty() {
            jobs.push(observed);
        }
    }
    (jobs, owned)
}

/// Adds to each job whose owner owns its step directories the CPU time its owner's
/// processes spent out of its owner's present jobs' directories ([`OwnerTime`]); returns
/// the CPU time of owners with no job present since the last sample (no job's).
fn give_back_owner_time(
    owner_time: &mut OwnerTime,
    jobs: &mut [ObservedJob],
    owned: &[Owned],
) -> u64 {
    let samples: Vec<OwnerSample> = owned
        .iter()
        .map(|o| OwnerSample {
            job: o.job,
            cpus: o.cpus,
            job_ns: o.job_ns,
            owner: (o.owner_dir.as_path(), o.owner_ns),
        })
        .collect();
    let credit = owner_time.credit(&samples, usage_ns_at);
    for j in jobs {
        if let (Some(counters), Some(ns)) = (j.counters.as_mut(), credit.jobs.get(&j.job)) {
            counters.usage_ns = counters.usage_ns.saturating_add(*ns);
        }
    }
    credit.unowned_ns
}

impl Drop for Keeper {
    /// slurmd stops: the file is what it continues from when it starts again.
    fn drop(&mut self) {
        if self.updated {
            self.publisher.finish(&self.ledger);
        }
    }
}

#[cfg(test)]
mod tests;
