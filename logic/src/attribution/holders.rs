//! slurmd's view of who holds the node's devices (GPUs), for the ledger's
//! [`crate::ledger::Split::Devices`]: each step's allocation from Slurm's own step record
//! ([`super::grant`]) matched to the source's devices ([`super::gres`]), and which job each
//! process using a device belongs to: the job whose cgroup holds it, as the kernel says
//! (`/proc/<pid>/cgroup`), whatever its parents, title or environment. A process in no
//! present job's cgroup that is still below its owner's `uid_<U>` (moved into a leftover
//! directory of an ended job, where Slurm gives step directories to their owner) is its
//! owner's: its use is charged to their present jobs holding the device, else to their
//! present jobs ([`charged_jobs`]).

use std::cell::OnceCell;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::cgroup::JobDir;
use super::grant::Grant;
use super::gres::{Allocation, GresOrder};
use super::procs::Procs;
use super::{StepId, StepKey};
use crate::source::DeviceReading;

/// A device Slurm allocates (a GPU) at one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedDevice {
    /// Its place in the source's enumeration, its name in [`crate::ledger::ObservedStep::holds`].
    pub position: u32,
    /// Its energy since the meter opened.
    pub energy_uj: u64,
    /// Each job's processes' use of it since the last sample: `(job, use)`, `None` for
    /// the processes of no job.
    pub busy: Vec<(Option<u32>, f64)>,
    /// Its MIG instances: each a device of its own to Slurm.
    pub instances: Vec<ObservedInstance>,
}

/// A MIG instance of an [`ObservedDevice`].
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedInstance {
    /// Its name in [`crate::ledger::ObservedStep::holds`].
    pub position: u32,
    pub sms: u32,
    /// Its SMs' activity since the last sample (percent-milliseconds; 0 where not
    /// reported), against its siblings'.
    pub activity: f64,
}

/// A process: its pid and when it started, in clock ticks after boot
/// ([`Procs::start_ticks`]): a pid given again is another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Process {
    pid: u32,
    start: u64,
}

/// Each present job's owner, and each job's devices by position ([`Holders::jobs_users`]).
type JobsUsers = (HashMap<u32, u32>, HashMap<u32, HashSet<u32>>);

/// Whose a device process is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Owner {
    /// The job whose cgroup holds it.
    Job(u32),
    /// No present job's cgroup holds it; it is below the `uid_<U>` of user `U`.
    User(u32),
}

/// How far up a device process's ancestors its slurmstepd is looked for, where Slurm
/// places no process in a cgroup of its job.
const MAX_DEPTH: usize = 64;

pub(crate) struct Holders {
    order: GresOrder,
    /// SlurmdSpoolDir, where the steps' grants are.
    spool: PathBuf,
    /// Each GRES index's device files, resolved once ([`GresOrder::Files`]).
    files: Vec<Vec<Option<(u32, u32)>>>,
    /// The driver's MIG capability minors, read when a MIG record is first matched.
    mig_minors: OnceCell<HashMap<String, u32>>,
    /// Each present step's allocation, once its grant is read.
    allocations: HashMap<StepKey, Allocation>,
    /// Each process using a device whose job is known: its job, while it uses one. A
    /// process is its pid and its start ([`Process`]): a pid given again is another
    /// process, which never inherits the job of the one it replaces. A process of no job
    /// is looked up again at the next sample (it may be a job's that was not placed yet).
    owners: HashMap<Process, u32>,
    /// Each slurmstepd's job directories, one per cgroup hierarchy, once it is in them.
    job_dirs: HashMap<u32, Vec<JobDir>>,
    /// Slurm placed no slurmstepd in a job's cgroup (no cgroup plugin): said once.
    said_no_cgroups: bool,
    /// The users whose device processes out of every job were said, while they last.
    said_users: HashSet<u32>,
    /// The jobs with a step present (its socket in the spool dir), placed or not.
    present_jobs: HashSet<u32>,
    /// Each `(device position, pid)`'s use at the last sample, and the start of the
    /// process that had the pid then (`None`: unknown).
    last_busy: HashMap<(u32, u32), (Option<u64>, u64)>,
    /// Each MIG instance's activity at the last sample, by position.
    last_activity: HashMap<u32, u64>,
}

impl Holders {
    pub(crate) fn new(order: GresOrder, spool: &Path) -> Self {
        if let GresOrder::Files(files) = &order {
            log::info!(
                "GPUs by GRES index (gres.conf, AutoDetect off): {}",
                files
                    .iter()
                    .map(|record| {
                        record
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                            .join("+")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Self {
            files: order.device_files(),
            order,
            spool: spool.to_path_buf(),
            mig_minors: OnceCell::new(),
            allocations: HashMap::new(),
            owners: HashMap::new(),
            job_dirs: HashMap::new(),
            said_no_cgroups: false,
            said_users: HashSet::new(),
            present_jobs: HashSet::new(),
            last_busy: HashMap::new(),
            last_activity: HashMap::new(),
        }
    }

    /// Forgets the steps that are gone.
    pub(crate) fn retain(&mut self, present: &HashSet<StepKey>) {
        self.allocations.retain(|step, _| present.contains(step));
        self.present_jobs = present.iter().map(|s| s.job).collect();
    }

    /// The devices an allocation names, by their positions among `devices`: by the
    /// library's order where Slurm detected the GPUs with it (a GPU split into MIG
    /// instances counting as its instances, in the library's order), or where the library
    /// tells no device files (its order is the only one known); by device file where Slurm
    /// detected them without a library (`AutoDetect=nvidia`); else by gres.conf's device
    /// files.
    fn positions(&self, procs: &Procs, a: &Allocation, devices: &[DeviceReading]) -> Vec<u32> {
        if self.order == GresOrder::DetectedByFile && devices.iter().any(|d| d.file.is_some()) {
            let mut by_file: Vec<&DeviceReading> =
                devices.iter().filter(|d| d.file.is_some()).collect();
            by_file.sort_by_key(|d| d.file);
            return a
                .gpus
                .iter()
                .filter_map(|&index| by_file.get(index as usize).map(|d| d.position))
                .collect();
        }
        if !matches!(self.order, GresOrder::Files(_)) || devices.iter().all(|d| d.file.is_none()) {
            let mut ordered: Vec<&DeviceReading> = devices.iter().collect();
            ordered.sort_by_key(|d| d.position);
            let detected: Vec<u32> = ordered
                .into_iter()
                .flat_map(|d| match d.instances.is_empty() {
                    true => vec![d.position],
                    false => d.instances.iter().map(|i| i.position).collect(),
                })
                .collect();
            return a
                .gpus
                .iter()
                .filter_map(|&index| detected.get(index as usize).copied())
                .collect();
        }
        a.gpus
            .iter()
            .filter_map(|&index| self.by_file(procs, index, devices))
            .collect()
    }

    /// The device GRES index `index` names by gres.conf's device file; a `MultipleFiles`
    /// record (MIG) names the instance whose capability files it lists (the driver's
    /// `mig-minors`).
    fn by_file(&self, procs: &Procs, index: u32, devices: &[DeviceReading]) -> Option<u32> {
        let record = self.files.get(index as usize)?;
        let gpu = (*record.first()?)?;
        let device = devices.iter().find(|d| d.file == Some(gpu))?;
        if record.len() == 1 || device.instances.is_empty() {
            return Some(device.position);
        }
        let caps: Vec<u32> = record[1..]
            .iter()
            .flatten()
            .map(|(_, minor)| *minor)
            .collect();
        let minors = self.mig_minors.get_or_init(|| procs.mig_minors());
        let cap = |key: String| minors.get(&key).is_some_and(|m| caps.contains(m));
        device
            .instances
            .iter()
            .find(|i| {
                let gi = format!("gpu{}/gi{}", gpu.1, i.gpu_instance);
                cap(format!("{gi}/access")) && cap(format!("{gi}/ci{}/access", i.compute_instance))
            })
            .map(|i| i.position)
    }

    /// What `step` holds: `(position, shares)`, from its grant ([`Grant`]), read when
    /// its slurmstepd has published it; until then nothing. The extern step is charged its
    /// job's devices ([`crate::ledger::Split::Devices`]).
    pub(crate) fn holds(
        &mut self,
        procs: &Procs,
        step: StepKey,
        devices: &[DeviceReading],
    ) -> Vec<(u32, f64)> {
        if step.step == StepId::EXTERN {
            return Vec::new();
        }
        if let Entry::Vacant(unknown) = self.allocations.entry(step) {
            let Some(grant) = Grant::read(&self.spool, step.job, step.step) else {
                return Vec::new();
            };
            let a = grant.allocation();
            if !a.gpus.is_empty() {
                log::info!(
                    "step {}.{} holds GPUs {:?} (GRES indexes, from Slurm's step record){}",
                    step.job,
                    step.step.cgroup_name(),
                    a.gpus,
                    a.shares.map_or(String::new(), |s| format!(", {s} shares"))
                );
            }
            unknown.insert(a);
        }
        let Some(a) = self.allocations.get(&step) else {
            return Vec::new();
        };
        let shares = a.shares_per_gpu();
        self.positions(procs, a, devices)
            .into_iter()
            .map(|position| (position, shares))
            .collect()
    }

    /// Each device's energy, and its processes' use since the last sample per job (and of
    /// no job), the jobs known by their slurmstepds' pids (`stepds`: pid to job), each
    /// process's job by the job cgroup that holds it.
    pub(crate) fn observe(
        &mut self,
        procs: &Procs,
        stepds: &HashMap<u32, u32>,
        devices: &[DeviceReading],
    ) -> Vec<ObservedDevice> {
        let reported: HashSet<u32> = devices
            .iter()
            .flat_map(|d| d.busy.iter().map(|(pid, _)| *pid))
            .collect();
        // each reported process running now, by its pid and start
        let running: HashMap<u32, u64> = reported
            .iter()
            .filter_map(|&pid| Some((pid, procs.start_ticks(pid)?)))
            .collect();
        // an owner is kept while its process is reported and its pid not given again
        self.owners.retain(|p, _| {
            reported.contains(&p.pid) && running.get(&p.pid).is_none_or(|now| *now == p.start)
        });
        // a process's job is looked up when it first uses a device, until it is found
        if !running
            .iter()
            .all(|(&pid, &start)| self.owners.contains_key(&Process { pid, start }))
        {
            self.place_jobs(procs, stepds);
        }
        let mut observed = Vec::new();
        let mut last_busy = HashMap::new();
        // for processes out of every job: each present job's owner, and what it holds
        let mut users: Option<JobsUsers> = None;
        let mut users_seen = HashSet::new();
        for d in devices {
            let mut busy: Vec<(Option<u32>, f64)> = Vec::new();
            for &(pid, total) in &d.busy {
                let before = self.last_busy.get(&(d.position, pid)).copied();
                // a process gone since the last sample: its last use was the one's seen then
                let start = running
                    .get(&pid)
                    .copied()
                    .or(before.and_then(|(start, _)| start));
                last_busy.insert((d.position, pid), (start, total));
                // a use that fell belongs to a new process of the same pid
                let before = before.map(|(_, b)| b).filter(|b| *b <= total);
                let used = total.saturating_sub(before.unwrap_or(0));
                if used == 0 {
                    continue;
                }
                let owner =
                    start.and_then(|start| self.owner(procs, stepds, Process { pid, start }));
                let jobs = match owner {
                    Some(Owner::Job(job)) => vec![job],
                    Some(Owner::User(uid)) => {
                        let (owners, held) =
                            users.get_or_insert_with(|| self.jobs_users(procs, stepds, devices));
                        let gpu: Vec<u32> = std::iter::once(d.position)
                            .chain(d.instances.iter().map(|i| i.position))
                            .collect();
                        let jobs = charged_jobs(uid, &gpu, owners, held);
                        users_seen.insert(uid);
                        if self.said_users.insert(uid) {
                            log::warn!(
                                "GPU {}: process {pid} is in no job's cgroup but below user \
                                 {uid}'s (moved into a leftover directory of an ended job, \
                                 which cgroup v1 before Slurm 23.02 or RootOwnedCgroups=no \
                                 allows): its use is charged to {}",
                                d.position,
                                match jobs.is_empty() {
                                    true => "no job (the user has none on this node)".to_string(),
                                    false => format!("the user's jobs {jobs:?}"),
                                }
                            );
                        }
                        jobs
                    }
                    None => Vec::new(),
                };
                let each = used as f64 / jobs.len().max(1) as f64;
                let owners: Vec<Option<u32>> = match jobs.is_empty() {
                    true => vec![None],
                    false => jobs.into_iter().map(Some).collect(),
                };
                for owner in owners {
                    match busy.iter_mut().find(|(j, _)| *j == owner) {
                        Some((_, b)) => *b += each,
                        None => busy.push((owner, each)),
                    }
                }
            }
            let instances = d
                .instances
                .iter()
                .map(|i| {
                    let total = i.activity.unwrap_or(0);
                    let before = self.last_activity.insert(i.position, total).unwrap_or(0);
                    ObservedInstance {
                        position: i.position,
                        sms: i.sms,
                        activity: total.saturating_sub(before) as f64,
                    }
                })
                .collect();
            observed.push(ObservedDevice {
                position: d.position,
                energy_uj: d.energy_uj,
                busy,
                instances,
            });
        }
        self.last_busy = last_busy;
        self.said_users.retain(|uid| users_seen.contains(uid));
        observed
    }

    /// Each present job's owner (by its `uid_<U>` directory: [`JobDir::owner`]) and the
    /// devices its steps hold, by position.
    fn jobs_users(
        &self,
        procs: &Procs,
        stepds: &HashMap<u32, u32>,
        devices: &[DeviceReading],
    ) -> JobsUsers {
        let owners = self
            .job_dirs
            .iter()
            .filter_map(|(stepd, dirs)| {
                Some((*stepds.get(stepd)?, dirs.iter().find_map(JobDir::owner)?))
            })
            .collect();
        let mut held: HashMap<u32, HashSet<u32>> = HashMap::new();
        for (step, a) in &self.allocations {
            held.entry(step.job)
                .or_default()
                .extend(self.positions(procs, a, devices));
        }
        (owners, held)
    }

    /// The job of `process`: kept once known; else looked up while the process runs (the
    /// pid still has its start, before and after the look-up, so the answer is not of a
    /// process that took the pid meanwhile), and kept only when found.
    /// A process in no placed job's cgroup but below a user's `uid_<U>` is that user's
    /// ([`JobDir::user_of`]) unless the job's directory it is in is of a job present (its
    /// slurmstepd is not placed yet: nobody's for now); neither is kept, it is asked again
    /// at each sample.
    fn owner(
        &mut self,
        procs: &Procs,
        stepds: &HashMap<u32, u32>,
        process: Process,
    ) -> Option<Owner> {
        if let Some(job) = self.owners.get(&process) {
            return Some(Owner::Job(*job));
        }
        let Process { pid, start } = process;
        if procs.start_ticks(pid) != Some(start) {
            return None;
        }
        let placed: Vec<(&JobDir, u32)> = self
            .job_dirs
            .iter()
            .filter_map(|(stepd, dirs)| Some((dirs, *stepds.get(stepd)?)))
            .flat_map(|(dirs, job)| dirs.iter().map(move |d| (d, job)))
            .collect();
        let mut user = None;
        let job = if placed.is_empty() {
            // no Slurm cgroup on this node: the slurmstepd a process descends from is all
            // there is (one that leaves its parents escapes)
            owning_job(procs, stepds, pid)
        } else {
            let cgroup = procs.cgroup(pid).unwrap_or_default();
            let job = placed
                .iter()
                .find(|(d, _)| d.holds(&cgroup))
                .map(|(_, job)| *job);
            if job.is_none() {
                user = placed
                    .iter()
                    .find_map(|(d, _)| d.user_of(&cgroup))
                    .filter(|(_, job)| !job.is_some_and(|j| self.present_jobs.contains(&j)))
                    .map(|(uid, _)| uid);
            }
            job
        };
        if procs.start_ticks(pid) != Some(start) {
            return None;
        }
        let Some(job) = job else {
            return user.map(Owner::User);
        };
        self.owners.insert(process, job);
        Some(Owner::Job(job))
    }

    /// Reads where Slurm placed the present jobs' slurmstepds, for those not read yet (kept
    /// while the slurmstepd lives).
    fn place_jobs(&mut self, procs: &Procs, stepds: &HashMap<u32, u32>) {
        self.job_dirs.retain(|pid, _| stepds.contains_key(pid));
        for &pid in stepds.keys() {
            if let Entry::Vacant(unknown) = self.job_dirs.entry(pid) {
                let dirs = JobDir::of_stepd(&procs.cgroup(pid).unwrap_or_default());
                if !dirs.is_empty() {
                    unknown.insert(dirs);
                }
            }
        }
        if self.job_dirs.is_empty() && !stepds.is_empty() && !self.said_no_cgroups {
            log::info!(
                "no slurmstepd is in a cgroup of its job (no cgroup plugin): GPU processes \
                 are matched to jobs by their parents"
            );
            self.said_no_cgroups = true;
        }
    }
}

/// The jobs a device process of user `uid` in no job's cgroup is charged to: the user's
/// present jobs (`owners`: job to its owner) holding the device (`gpu`: its positions, the
/// GPU's and its MIG instances'; `held`: each job's devices), else all the user's present
/// jobs; none (the use is nobody's) where the user has no job present.
fn charged_jobs(
    uid: u32,
    gpu: &[u32],
    owners: &HashMap<u32, u32>,
    held: &HashMap<u32, HashSet<u32>>,
) -> Vec<u32> {
    let mut theirs: Vec<u32> = owners
        .iter()
        .filter(|(_, owner)| **owner == uid)
        .map(|(job, _)| *job)
        .collect();
    theirs.sort_unstable();
    let holding: Vec<u32> = theirs
        .iter()
        .copied()
        .filter(|job| {
            held.get(job)
                .is_some_and(|h| gpu.iter().any(|p| h.contains(p)))
        })
        .collect();
    match holding.is_empty() {
        true => theirs,
        false => holding,
    }
}

/// The job of the slurmstepd that `pid` descends from.
fn owning_job(procs: &Procs, stepds: &HashMap<u32, u32>, pid: u32) -> Option<u32> {
    let mut at = pid;
    for _ in 0..MAX_DEPTH {
        if let Some(job) = stepds.get(&at) {
            return Some(*job);
        }
        at = procs.parent(at).filter(|p| *p > 1)?;
    }
    None
}

#[cfg(test)]
mod tests;
