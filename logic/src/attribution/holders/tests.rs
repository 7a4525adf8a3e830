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
    // job 9's step is present (its socket), its slurmstepd not found yet
    holders.retain(&[7, 8, 9].map(|job| StepKey::new(job, StepId(0))).into());
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

/// Issue 53: a GPU process its owner (uid 1000) moved into a leftover directory of
/// their ended job 5 is in no present job's cgroup: its use is its owner's job holding
/// the GPU (7), not their other job (8) nor the neighbour's (9, uid 2000's, holding it
/// too); with none of the owner's jobs holding it, their jobs' alike; with none present,
/// nobody's. A process in the directory of a job present whose slurmstepd is not found
/// yet (10) is nobody's until it is.
#[test]
fn a_gpu_process_moved_out_of_its_job_is_its_owners_jobs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (root, spool) = (tmp.path().join("proc"), tmp.path().join("spool"));
    std::fs::create_dir_all(&spool).expect("spool");
    let mut holders = Holders::new(GresOrder::Detected, &spool);
    let procs = Procs::from_path(&root);
    let v1 = |dir: &str| format!("12:freezer:/slurm/{dir}\n11:cpuset:/slurm/{dir}\n");
    for (stepd, uid, job) in [(100, 1000, 7), (200, 1000, 8), (300, 2000, 9)] {
        let dir = format!("uid_{uid}/job_{job}/step_0");
        process(&root, stepd, &format!("slurmstepd: [{job}.0]"), &v1(&dir));
    }
    process(&root, 40, "python", &v1("uid_1000/job_5/step_batch/hide"));
    stat(&root, 40, 1, 1000);
    process(&root, 50, "python", &v1("uid_1000/job_10/step_0/task_0"));
    stat(&root, 50, 1, 1000);
    let devices = [gpu(0, 0, &[(40, 30), (50, 10)])];
    let steps = [7, 8, 9, 10].map(|job| StepKey::new(job, StepId(0)));
    holders.retain(&steps.into());
    for job in [7, 9] {
        shards(job, StepId(0), 2, 0).publish(&spool).expect("grant");
    }
    for step in steps {
        holders.holds(&procs, step, &devices);
    }
    let mut stepds: HashMap<u32, u32> = [(100, 7), (200, 8), (300, 9)].into();
    let seen = holders.observe(&procs, &stepds, &devices);
    assert_eq!(seen[0].busy, vec![(Some(7), 30.0), (None, 10.0)]);
    // job 7 ends: its owner's job 8 holds no GPU, and pays
    stepds.remove(&100);
    holders.retain(&[8, 9, 10].map(|job| StepKey::new(job, StepId(0))).into());
    let seen = holders.observe(&procs, &stepds, &[gpu(0, 0, &[(40, 50), (50, 10)])]);
    assert_eq!(seen[0].busy, vec![(Some(8), 20.0)]);
    // the owner has no job left: nobody's
    stepds.remove(&200);
    holders.retain(&[9].map(|job| StepKey::new(job, StepId(0))).into());
    let seen = holders.observe(&procs, &stepds, &[gpu(0, 0, &[(40, 55), (50, 10)])]);
    assert_eq!(seen[0].busy, vec![(None, 5.0)]);
}

#[test]
fn an_owners_use_goes_to_their_jobs_holding_the_gpu_else_to_all_theirs() {
    let owners: HashMap<u32, u32> = [(7, 1000), (8, 1000), (9, 2000), (11, 1000)].into();
    let held: HashMap<u32, HashSet<u32>> =
        [(7, [100].into()), (9, [0].into()), (11, [0, 1].into())].into();
    // GPU 0 (its MIG instance 100): jobs 7 and 11 hold a part of it
    assert_eq!(charged_jobs(1000, &[0, 100], &owners, &held), vec![7, 11]);
    assert_eq!(charged_jobs(1000, &[2], &owners, &held), vec![7, 8, 11]);
    assert_eq!(charged_jobs(3000, &[0], &owners, &held), Vec::<u32>::new());
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
    let held =
        |holders: &mut Holders, job| holders.holds(&procs, StepKey::new(job, StepId(0)), &devices);
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
