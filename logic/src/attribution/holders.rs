//! slurmd's view of who holds the node's devices (GPUs), for the ledger's
//! [`crate::ledger::Split::Devices`]: each step's allocation from Slurm's own step record
//! ([`super::grant`]) matched to the source's devices ([`super::gres`]), and which job each
//! process using a device belongs to: the job whose cgroup holds it, as the kernel says
//! (`/proc/<pid>/cgroup`), whatever its parents, title or environment.

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
/// ([`Procs::start_ticks`]).
type Process = (u32, u64);

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
            last_busy: HashMap::new(),
            last_activity: HashMap::new(),
        }
    }

    /// Forgets the steps that are gone.
    pub(crate) fn retain(&mut self, present: &HashSet<StepKey>) {
        self.allocations.retain(|step, _| present.contains(step));
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
        self.owners.retain(|(pid, start), _| {
            reported.contains(pid) && running.get(pid).is_none_or(|now| now == start)
        });
        // a process's job is looked up when it first uses a device, until it is found
        if !running
            .iter()
            .all(|p| self.owners.contains_key(&(*p.0, *p.1)))
        {
            self.place_jobs(procs, stepds);
        }
        let mut observed = Vec::new();
        let mut last_busy = HashMap::new();
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
                let owner = start.and_then(|start| self.owner(procs, stepds, (pid, start)));
                match busy.iter_mut().find(|(j, _)| *j == owner) {
                    Some((_, b)) => *b += used as f64,
                    None => busy.push((owner, used as f64)),
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
        observed
    }

    /// The job of `process`: kept once known; else looked up while the process runs (the
    /// pid still has its start, before and after the look-up, so the answer is not of a
    /// process that took the pid meanwhile), and kept only when found.
    fn owner(
        &mut self,
        procs: &Procs,
        stepds: &HashMap<u32, u32>,
        process: Process,
    ) -> Option<u32> {
        if let Some(job) = self.owners.get(&process) {
            return Some(*job);
        }
        let (pid, start) = process;
        if procs.start_ticks(pid) != Some(start) {
            return None;
        }
        let placed: Vec<(&JobDir, u32)> = self
            .job_dirs
            .iter()
            .filter_map(|(stepd, dirs)| Some((dirs, *stepds.get(stepd)?)))
            .flat_map(|(dirs, job)| dirs.iter().map(move |d| (d, job)))
            .collect();
        let job = if placed.is_empty() {
            // no Slurm cgroup on this node: the slurmstepd a process descends from is all
            // there is (one that leaves its parents escapes)
            owning_job(procs, stepds, pid)
        } else {
            let cgroup = procs.cgroup(pid).unwrap_or_default();
            placed
                .iter()
                .find(|(d, _)| d.holds(&cgroup))
                .map(|(_, job)| *job)
        }
        .filter(|_| procs.start_ticks(pid) == Some(start))?;
        self.owners.insert(process, job);
        Some(job)
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
mod tests {
    use super::*;
    use crate::attribution::cgroup::tests::write;
    use crate::attribution::grant::tests::{shards, whole};
    use crate::attribution::procs::tests::{child, process};

    fn gpu(position: u32, minor: u32, busy: &[(u32, u64)]) -> DeviceReading {
        DeviceReading {
            position,
            file: Some((195, minor)),
            energy_uj: 1,
            watts: None,
            busy: busy.to_vec(),
            instances: vec![],
        }
    }

    /// A task of `stepd` in `cgroup`, its environment claiming GPUs it was not given.
    fn task(root: &Path, stepd: u32, pid: u32, cgroup: &str) {
        child(root, stepd, pid);
        process(root, pid, "python", cgroup);
        write(
            &root.join(format!("{pid}/environ")),
            "SLURM_JOB_ID=7\0SLURM_JOB_GPUS=0,1\0CUDA_VISIBLE_DEVICES=0,1\0",
        );
        stat(root, pid, stepd, 1000);
    }

    /// `/proc/<pid>/stat` of a process whose parent is `parent`, started `start` clock
    /// ticks after boot.
    fn stat(root: &Path, pid: u32, parent: u32, start: u64) {
        write(
            &root.join(format!("{pid}/stat")),
            &format!("{pid} (python) S {parent} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
        );
    }

    /// GRES indexes come from the steps' grants (what tasks' environments say is not
    /// read), named by gres.conf's files, matched to the library's GPUs by minor; the
    /// extern step and a step whose grant is not published hold nothing yet; use is per
    /// job, by the job cgroup that holds the process, whatever its parents.
    #[test]
    fn steps_hold_the_gpus_slurm_granted_and_use_is_the_cgroups_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (root, spool) = (tmp.path().join("proc"), tmp.path().join("spool"));
        std::fs::create_dir_all(&spool).expect("spool");
        // gres.conf's order: nvidia3 is GRES 0, nvidia5 is GRES 1; the library has 5 first
        let devices = [gpu(0, 5, &[(40, 30), (50, 10), (60, 5)]), gpu(1, 3, &[])];
        let order = GresOrder::Files(vec![vec!["/dev/null".into()], vec!["/dev/zero".into()]]);
        let mut holders = Holders::new(order, &spool);
        // stand-in numbers for the two files: as if nvidia3 and nvidia5
        holders.files = vec![vec![Some((195, 3))], vec![Some((195, 5))]];
        let procs = Procs::from_path(&root);
        let v2 = "0::/system.slice/slurmstepd.scope";
        process(
            &root,
            100,
            "slurmstepd: [7.0]",
            &format!("{v2}/job_7/step_0/slurm"),
        );
        process(
            &root,
            200,
            "slurmstepd: [8.batch]",
            &format!("{v2}/job_8/step_batch/slurm"),
        );
        task(&root, 100, 40, &format!("{v2}/job_7/step_0/user/task_0"));
        // job 8's process double-forked: its parent is init, its cgroup still job 8's
        task(&root, 1, 50, &format!("{v2}/job_8/step_batch/user/task_0"));
        // a process outside every job, whose parent is job 7's slurmstepd
        task(
            &root,
            100,
            60,
            "0::/user.slice/user-1000.slice/session-3.scope",
        );
        assert!(
            holders
                .holds(&procs, StepKey::new(7, StepId(0)), &devices)
                .is_empty()
        );
        shards(7, StepId(0), 2, 1).publish(&spool).expect("grant");
        shards(8, StepId::BATCH, 2, 1)
            .publish(&spool)
            .expect("grant");
        assert_eq!(
            holders.holds(&procs, StepKey::new(7, StepId(0)), &devices),
            vec![(0, 2.0)]
        );
        assert!(
            holders
                .holds(&procs, StepKey::new(7, StepId::EXTERN), &devices)
                .is_empty()
        );
        assert_eq!(
            holders.holds(&procs, StepKey::new(8, StepId::BATCH), &devices),
            vec![(0, 2.0)]
        );
        let stepds: HashMap<u32, u32> = [(100, 7), (200, 8)].into_iter().collect();
        let seen = holders.observe(&procs, &stepds, &devices);
        assert_eq!(
            seen[0].busy,
            vec![(Some(7), 30.0), (Some(8), 10.0), (None, 5.0)]
        );
        // the next sample counts only what was used since
        let later = [gpu(0, 5, &[(40, 45), (50, 10), (60, 9)]), gpu(1, 3, &[])];
        let seen = holders.observe(&procs, &stepds, &later);
        assert_eq!(seen[0].busy, vec![(Some(7), 15.0), (None, 4.0)]);
        assert!(seen[1].busy.is_empty());
    }

    /// A process is its pid and its start: job 7's GPU process 40 ends and its pid is
    /// given to a process of job 8 while the library still counts the pid's use on; the
    /// use since is job 8's. A process whose job is not known yet (its slurmstepd not
    /// placed) is nobody's now and looked up again at the next sample.
    #[test]
    fn a_pid_given_again_is_another_process_and_an_unknown_owner_is_asked_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (root, spool) = (tmp.path().join("proc"), tmp.path().join("spool"));
        std::fs::create_dir_all(&spool).expect("spool");
        let mut holders = Holders::new(GresOrder::Detected, &spool);
        let procs = Procs::from_path(&root);
        let v1 = |job: u32| format!("4:cpuacct:/slurm/uid_0/job_{job}/step_0");
        for (stepd, job) in [(100, 7), (200, 8), (300, 9)] {
            process(&root, stepd, &format!("slurmstepd: [{job}.0]"), &v1(job));
        }
        process(&root, 40, "python", &format!("{}/task_0", v1(7)));
        stat(&root, 40, 100, 1000);
        process(&root, 60, "python", &format!("{}/task_0", v1(9)));
        stat(&root, 60, 300, 1000);
        let mut stepds: HashMap<u32, u32> = [(100, 7), (200, 8)].into_iter().collect();
        let busy = |b40: u64, b60: u64| [gpu(0, 0, &[(40, b40), (60, b60)])];
        let seen = holders.observe(&procs, &stepds, &busy(30, 10));
        assert_eq!(seen[0].busy, vec![(Some(7), 30.0), (None, 10.0)]);
        // pid 40 is now job 8's process, started later; job 9's slurmstepd is known
        process(&root, 40, "python", &format!("{}/task_0", v1(8)));
        stat(&root, 40, 200, 5000);
        stepds.insert(300, 9);
        let seen = holders.observe(&procs, &stepds, &busy(50, 15));
        assert_eq!(seen[0].busy, vec![(Some(8), 20.0), (Some(9), 5.0)]);
    }

    /// `AutoDetect=nvidia` (no library): slurmd numbers the GPUs by device file, so GRES 0
    /// is `/dev/nvidia3` and GRES 1 `/dev/nvidia10` (natural order) wherever the library
    /// lists them; `AutoDetect=nvml` numbers them in the library's order. A partitioned GPU
    /// is one index to the former (it detects no MIG instance).
    #[test]
    fn gpus_detected_without_a_library_are_numbered_by_device_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let spool = tmp.path().join("spool");
        std::fs::create_dir_all(&spool).expect("spool");
        let procs = Procs::from_path(&tmp.path().join("proc"));
        let mut partitioned = gpu(2, 3, &[]);
        partitioned.instances = vec![crate::source::InstanceReading {
            position: 100,
            uuid: "MIG-a".into(),
            gpu_instance: 1,
            compute_instance: 0,
            sms: 14,
            activity: None,
        }];
        // the library lists nvidia10, nvidia5, then nvidia3
        let devices = [gpu(0, 10, &[]), gpu(1, 5, &[]), partitioned];
        for (job, index) in [(7, 0), (8, 1), (9, 2)] {
            whole(job, StepId(0), index).publish(&spool).expect("grant");
        }
        let mut by_file = Holders::new(GresOrder::DetectedByFile, &spool);
        let mut by_library = Holders::new(GresOrder::Detected, &spool);
        let held = |holders: &mut Holders, job| {
            holders.holds(&procs, StepKey::new(job, StepId(0)), &devices)
        };
        assert_eq!(held(&mut by_file, 7), vec![(2, 1.0)], "GRES 0: nvidia3");
        assert_eq!(held(&mut by_file, 8), vec![(1, 1.0)], "GRES 1: nvidia5");
        assert_eq!(held(&mut by_file, 9), vec![(0, 1.0)], "GRES 2: nvidia10");
        assert_eq!(held(&mut by_library, 7), vec![(0, 1.0)]);
        assert_eq!(held(&mut by_library, 9), vec![(100, 1.0)]);
    }

    /// With AutoDetect, GRES indexes follow the library's order, a GPU split into MIG
    /// instances counting as its instances; with gres.conf, a `MultipleFiles` record names
    /// the instance its capability files give access to (the driver's `mig-minors`).
    #[test]
    fn mig_instances_are_found_by_library_order_or_by_capability_files() {
        use crate::source::InstanceReading;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (root, spool) = (tmp.path().join("proc"), tmp.path().join("spool"));
        std::fs::create_dir_all(&spool).expect("spool");
        write(
            &root.join("driver/nvidia-caps/mig-minors"),
            "gpu3/gi1/access 21\ngpu3/gi1/ci0/access 22\ngpu3/gi2/access 30\n\
             gpu3/gi2/ci0/access 31\n",
        );
        let instance = |position, gpu_instance, uuid: &str| InstanceReading {
            position,
            uuid: uuid.into(),
            gpu_instance,
            compute_instance: 0,
            sms: 14,
            activity: Some(500),
        };
        let mut parent = gpu(1, 3, &[]);
        parent.instances = vec![instance(100, 1, "MIG-a"), instance(101, 2, "MIG-b")];
        let devices = [gpu(0, 2, &[]), parent];
        let procs = Procs::from_path(&root);
        whole(7, StepId(0), 1).publish(&spool).expect("grant");
        whole(8, StepId(0), 2).publish(&spool).expect("grant");
        let mut detected = Holders::new(GresOrder::Detected, &spool);
        assert_eq!(
            detected.holds(&procs, StepKey::new(7, StepId(0)), &devices),
            vec![(100, 1.0)]
        );
        assert_eq!(
            detected.holds(&procs, StepKey::new(8, StepId(0)), &devices),
            vec![(101, 1.0)]
        );
        let mut files = Holders::new(GresOrder::Files(vec![]), &spool);
        // GRES 1 is GI 2's record, GRES 2 GI 1's (the capability files' minors)
        files.files = vec![
            vec![Some((195, 2))],
            vec![Some((195, 3)), Some((235, 30)), Some((235, 31))],
            vec![Some((195, 3)), Some((235, 21)), Some((235, 22))],
        ];
        assert_eq!(
            files.holds(&procs, StepKey::new(7, StepId(0)), &devices),
            vec![(101, 1.0)]
        );
        assert_eq!(
            files.holds(&procs, StepKey::new(8, StepId(0)), &devices),
            vec![(100, 1.0)]
        );
        let seen = files.observe(&procs, &HashMap::new(), &devices);
        assert_eq!(seen[1].instances[1].activity, 500.0);
        assert_eq!(
            files.observe(&procs, &HashMap::new(), &devices)[1].instances[1].activity,
            0.0
        );
    }
}
