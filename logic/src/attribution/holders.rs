//! slurmd's view of who holds the node's devices (GPUs), for the ledger's
//! [`super::ledger::Split::Devices`]: each step's allocation from its tasks' environment
//! ([`super::gres`]) matched to the source's devices, and which job each process using a
//! device belongs to (the slurmstepd it descends from).

use std::cell::OnceCell;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::StepId;
use super::gres::{Allocation, GresOrder, allocation};
use super::ledger::{ObservedDevice, ObservedInstance};
use super::procs::Procs;
use crate::source::DeviceReading;

/// How far up a device process's ancestors its slurmstepd is looked for.
const MAX_DEPTH: usize = 64;

pub struct Holders {
    order: GresOrder,
    /// Each GRES index's device files, resolved once ([`GresOrder::Files`]).
    files: Vec<Vec<Option<(u32, u32)>>>,
    /// The driver's MIG capability minors, read when a MIG record is first matched.
    mig_minors: OnceCell<HashMap<String, u32>>,
    /// Each present step's allocation, once read from one of its tasks.
    allocations: HashMap<(u32, StepId), Allocation>,
    /// Each process using a device: its job (`None`: no job's), while it uses one.
    owners: HashMap<u32, Option<u32>>,
    /// Each `(device position, pid)`'s use at the last sample.
    last_busy: HashMap<(u32, u32), u64>,
    /// Each MIG instance's activity at the last sample, by position.
    last_activity: HashMap<u32, u64>,
}

impl Holders {
    pub fn new(order: GresOrder) -> Self {
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
            mig_minors: OnceCell::new(),
            allocations: HashMap::new(),
            owners: HashMap::new(),
            last_busy: HashMap::new(),
            last_activity: HashMap::new(),
        }
    }

    /// Forgets the steps that are gone.
    pub fn retain(&mut self, present: &HashSet<(u32, StepId)>) {
        self.allocations.retain(|step, _| present.contains(step));
    }

    /// The devices an allocation names, by their positions among `devices`: MIG instances
    /// by the UUIDs its tasks were given where they were, else its GRES indexes.
    fn positions(&self, procs: &Procs, a: &Allocation, devices: &[DeviceReading]) -> Vec<u32> {
        if !a.mig_uuids.is_empty() {
            let instances: Vec<_> = devices.iter().flat_map(|d| &d.instances).collect();
            return a
                .mig_uuids
                .iter()
                .filter_map(|uuid| instances.iter().find(|i| &i.uuid == uuid))
                .map(|i| i.position)
                .collect();
        }
        a.gpus
            .iter()
            .filter_map(|&index| self.position(procs, index, devices))
            .collect()
    }

    /// The device a GRES index names: by the library's order where Slurm detected the
    /// GPUs, else by gres.conf's device file; a `MultipleFiles` record (MIG) names the
    /// instance whose capability files it lists (the driver's `mig-minors`).
    fn position(&self, procs: &Procs, index: u32, devices: &[DeviceReading]) -> Option<u32> {
        // (and where the library tells no device files, its order is the only one known)
        if self.order == GresOrder::Detected || devices.iter().all(|d| d.file.is_none()) {
            return devices
                .iter()
                .find(|d| d.position == index)
                .map(|d| d.position);
        }
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
        if let Entry::Vacant(unknown) = self.allocations.entry(step) {
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
            instances: vec![],
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
        let order = GresOrder::Files(vec![vec!["/dev/null".into()], vec!["/dev/zero".into()]]);
        let mut holders = Holders::new(order);
        // stand-in numbers for the two files: as if nvidia3 and nvidia5
        holders.files = vec![vec![Some((195, 3))], vec![Some((195, 5))]];
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

    /// MIG instances are named by the UUIDs the tasks were given, or by a `MultipleFiles`
    /// record's capability files, which the driver's `mig-minors` ties to an instance.
    #[test]
    fn mig_instances_are_found_by_uuid_or_by_capability_files() {
        use crate::source::InstanceReading;
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
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
        let mut parent = gpu(0, 3, &[]);
        parent.instances = vec![instance(100, 1, "MIG-a"), instance(101, 2, "MIG-b")];
        let devices = [parent];
        let mut holders = Holders::new(GresOrder::Files(vec![]));
        // GRES 0 is GI 2's record, GRES 1 GI 1's (the capability files' minors)
        holders.files = vec![
            vec![Some((195, 3)), Some((235, 30)), Some((235, 31))],
            vec![Some((195, 3)), Some((235, 21)), Some((235, 22))],
        ];
        let procs = Procs::from_path(root);
        task(root, 100, 40, "SLURM_JOB_ID=7 SLURM_STEP_GPUS=1");
        task(
            root,
            200,
            50,
            "SLURM_JOB_ID=8 SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=MIG-a",
        );
        assert_eq!(
            holders.holds(&procs, (7, StepId(0)), Some(100), &devices),
            vec![(100, 1.0)]
        );
        // the UUID wins over the index
        assert_eq!(
            holders.holds(&procs, (8, StepId(0)), Some(200), &devices),
            vec![(100, 1.0)]
        );
        let seen = holders.observe(&procs, &HashMap::new(), &devices);
        assert_eq!(seen[0].instances[1].activity, 500.0);
        assert_eq!(
            holders.observe(&procs, &HashMap::new(), &devices)[0].instances[1].activity,
            0.0
        );
    }
}
