//! slurmd's view of who holds the node's devices (GPUs), for the ledger's
//! [`super::ledger::Split::Devices`]: each step's allocation from its tasks' environment
//! ([`super::gres`]) matched to the source's devices, and which job each process using a
//! device belongs to (the slurmstepd it descends from).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::StepId;
use super::gres::{Allocation, GresOrder, allocation};
use super::ledger::ObservedDevice;
use super::procs::Procs;
use crate::source::DeviceReading;

/// How far up a device process's ancestors its slurmstepd is looked for.
const MAX_DEPTH: usize = 64;

pub struct Holders {
    order: GresOrder,
    /// Each GRES index's device file, resolved once ([`GresOrder::Files`]).
    files: Vec<Option<(u32, u32)>>,
    /// Each present step's allocation, once read from one of its tasks.
    allocations: HashMap<(u32, StepId), Allocation>,
    /// Each process using a device: its job (`None`: no job's), while it uses one.
    owners: HashMap<u32, Option<u32>>,
    /// Each `(device position, pid)`'s use at the last sample.
    last_busy: HashMap<(u32, u32), u64>,
}

impl Holders {
    pub fn new(order: GresOrder) -> Self {
        if let GresOrder::Files(files) = &order {
            log::info!(
                "GPUs by GRES index (gres.conf, AutoDetect off): {}",
                files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Self {
            files: order.device_files(),
            order,
            allocations: HashMap::new(),
            owners: HashMap::new(),
            last_busy: HashMap::new(),
        }
    }

    /// Forgets the steps that are gone.
    pub fn retain(&mut self, present: &HashSet<(u32, StepId)>) {
        self.allocations.retain(|step, _| present.contains(step));
    }

    /// The device a GRES index names, by its position among `devices`.
    fn position(&self, index: u32, devices: &[DeviceReading]) -> Option<u32> {
        let device = match &self.order {
            GresOrder::Detected => devices.iter().find(|d| d.position == index),
            GresOrder::Files(_) => {
                let file = (*self.files.get(index as usize)?)?;
                devices.iter().find(|d| d.file == Some(file))
            }
        };
        device.map(|d| d.position)
    }

    /// What `step` (its slurmstepd `stepd`, when found) holds: `(position, shares)`. Its
    /// allocation is read from the first of its tasks that has started; until then
    /// nothing. The extern step has no tasks of its own: it is charged its job's devices
    /// ([`super::ledger::Split::Devices`]).
    pub fn holds(
        &mut self,
        procs: &Procs,
        step: (u32, StepId),
        stepd: Option<u32>,
        devices: &[DeviceReading],
    ) -> Vec<(u32, f64)> {
        if step.1 == StepId::EXTERN {
            return Vec::new();
        }
        let a = match self.allocations.entry(step) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(unknown) => {
                let found = stepd
                    .into_iter()
                    .flat_map(|pid| procs.children(pid))
                    .find_map(|task| allocation(&procs.environ(task)?, step.1));
                let Some(a) = found else {
                    return Vec::new();
                };
                if !a.gpus.is_empty() {
                    log::info!(
                        "step {}.{} holds GPUs {:?} (GRES indexes){}",
                        step.0,
                        step.1.cgroup_name(),
                        a.gpus,
                        a.shares.map_or(String::new(), |s| format!(", {s} shares"))
                    );
                }
                unknown.insert(a)
            }
        };
        let (gpus, shares) = (a.gpus.clone(), a.shares_per_gpu());
        gpus.iter()
            .filter_map(|&index| Some((self.position(index, devices)?, shares)))
            .collect()
    }

    /// Each device's energy, and its processes' use since the last sample per job, the
    /// jobs known by their slurmstepds' pids (`stepds`: pid to job).
    pub fn observe(
        &mut self,
        procs: &Procs,
        stepds: &HashMap<u32, u32>,
        devices: &[DeviceReading],
    ) -> Vec<ObservedDevice> {
        let using: HashSet<u32> = devices
            .iter()
            .flat_map(|d| d.busy.iter().map(|(pid, _)| *pid))
            .collect();
        self.owners.retain(|pid, _| using.contains(pid));
        let mut observed = Vec::new();
        let mut last_busy = HashMap::new();
        for d in devices {
            let mut busy: Vec<(u32, f64)> = Vec::new();
            for &(pid, total) in &d.busy {
                let before = self.last_busy.get(&(d.position, pid)).copied();
                last_busy.insert((d.position, pid), total);
                // a use that fell belongs to a new process of the same pid
                let used = total.saturating_sub(before.filter(|b| *b <= total).unwrap_or(0));
                let owner = *self
                    .owners
                    .entry(pid)
                    .or_insert_with(|| owning_job(procs, stepds, pid));
                if let (Some(job), true) = (owner, used > 0) {
                    match busy.iter_mut().find(|(j, _)| *j == job) {
                        Some((_, b)) => *b += used as f64,
                        None => busy.push((job, used as f64)),
                    }
                }
            }
            observed.push(ObservedDevice {
                position: d.position,
                energy_uj: d.energy_uj,
                busy,
            });
        }
        self.last_busy = last_busy;
        observed
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
    use crate::attribution::procs::tests::child;
    use std::path::Path;

    fn task(root: &Path, stepd: u32, pid: u32, env: &str) {
        child(root, stepd, pid);
        write(
            &root.join(format!("{pid}/environ")),
            &env.replace(' ', "\0"),
        );
        write(
            &root.join(format!("{pid}/stat")),
            &format!("{pid} (sh) S {stepd} 1 1 0"),
        );
    }

    fn gpu(position: u32, minor: u32, busy: &[(u32, u64)]) -> DeviceReading {
        DeviceReading {
            position,
            file: Some((195, minor)),
            energy_uj: 1,
            watts: None,
            busy: busy.to_vec(),
        }
    }

    /// GRES indexes name gres.conf's files, matched to the library's GPUs by minor; the
    /// extern step and a step whose tasks have not started hold nothing yet; use is per
    /// job, from the slurmstepd a process descends from.
    #[test]
    fn steps_hold_the_gpus_their_tasks_were_given() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let dev = tmp.path().join("dev");
        std::fs::create_dir_all(&dev).expect("mkdir");
        // gres.conf's order: nvidia3 is GRES 0, nvidia5 is GRES 1; the library has 5 first
        let devices = [gpu(0, 5, &[(40, 30), (50, 10)]), gpu(1, 3, &[])];
        let order = GresOrder::Files(vec!["/dev/null".into(), "/dev/zero".into()]);
        let mut holders = Holders::new(order);
        // stand-in numbers for the two files: as if nvidia3 and nvidia5
        holders.files = vec![Some((195, 3)), Some((195, 5))];
        let procs = Procs::from_path(root);
        assert!(
            holders
                .holds(&procs, (7, StepId(0)), Some(100), &devices)
                .is_empty()
        );
        task(
            root,
            100,
            40,
            "SLURM_JOB_ID=7 SLURM_STEP_GPUS=1 SLURM_SHARDS_ON_NODE=2",
        );
        task(
            root,
            200,
            50,
            "SLURM_JOB_ID=8 SLURM_JOB_GPUS=1 SLURM_SHARDS_ON_NODE=2",
        );
        assert_eq!(
            holders.holds(&procs, (7, StepId(0)), Some(100), &devices),
            vec![(0, 2.0)]
        );
        assert!(
            holders
                .holds(&procs, (7, StepId::EXTERN), Some(100), &devices)
                .is_empty()
        );
        assert_eq!(
            holders.holds(&procs, (8, StepId::BATCH), Some(200), &devices),
            vec![(0, 2.0)]
        );
        let stepds: HashMap<u32, u32> = [(100, 7), (200, 8)].into_iter().collect();
        let seen = holders.observe(&procs, &stepds, &devices);
        assert_eq!(seen[0].busy, vec![(7, 30.0), (8, 10.0)]);
        // the next sample counts only what was used since
        let later = [gpu(0, 5, &[(40, 45), (50, 10)]), gpu(1, 3, &[])];
        let seen = holders.observe(&procs, &stepds, &later);
        assert_eq!(seen[0].busy, vec![(7, 15.0)]);
        assert!(seen[1].busy.is_empty());
    }
}
