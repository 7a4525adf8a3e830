use super::*;
use std::fs;

pub(crate) fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// A job in a v1 tree as Slurm's cgroup/v1 plugin builds it (`<slurm>/uid_1000/job_J`
/// under each controller: `slurm`, or `slurm_<node>` in a multiple-slurmd build),
/// Debian's co-mounted `cpu,cpuacct` included; `steps`: directory and CPU time (ns).
/// Returns the job's directory as `/proc/<pid>/cgroup` shows it.
pub(crate) fn v1_tree(
    root: &Path,
    slurm: &str,
    job: u32,
    cpus: &str,
    limit: u64,
    job_ns: u64,
    steps: &[(&str, u64)],
) -> String {
    write(&root.join("cpu,cpuacct/cpuacct.usage"), "999999999\n");
    let rel = format!("{slurm}/uid_1000/job_{job}");
    write(
        &root.join("cpu,cpuacct").join(&rel).join("cpuacct.usage"),
        &format!("{job_ns}\n"),
    );
    write(
        &root.join("cpuset").join(&rel).join("cpuset.cpus"),
        &format!("{cpus}\n"),
    );
    write(
        &root.join("memory").join(&rel).join("memory.limit_in_bytes"),
        &format!("{limit}\n"),
    );
    write(
        &root.join("freezer").join(&rel).join("freezer.state"),
        "THAWED\n",
    );
    for (step, ns) in steps {
        write(
            &root
                .join("freezer")
                .join(&rel)
                .join(step)
                .join("freezer.state"),
            "THAWED\n",
        );
        let step_dir = root.join("cpu,cpuacct").join(&rel).join(step);
        write(&step_dir.join("cpuacct.usage"), &format!("{ns}\n"));
        write(&step_dir.join("task_0/cpuacct.usage"), &format!("{ns}\n"));
        write(
            &root
                .join("cpuset")
                .join(&rel)
                .join(step)
                .join("cpuset.cpus"),
            cpus,
        );
    }
    format!("/{rel}")
}

/// `/proc/<pid>/cgroup` of a v1 slurmstepd of `step` in `job` (as [`v1_tree`] returns
/// it): at job level in freezer (proctrack/cgroup), at step level in cpuset and memory
/// when task/cgroup constrains them, where slurmd was in cpuacct and systemd's trees.
pub(crate) fn v1_stepd(job: &str, step: &str, constrained: bool) -> String {
    let mut text = format!("12:freezer:{job}\n");
    if constrained {
        text += &format!("11:cpuset:{job}/{step}\n10:memory:{job}/{step}\n");
    } else {
        text += "11:cpuset:/\n10:memory:/system.slice/slurmd.service\n";
    }
    text + "9:pids:/system.slice/slurmd.service\n4:cpu,cpuacct:/system.slice/slurmd.service\n\
            1:name=systemd:/system.slice/slurmd.service\n0::/system.slice/slurmd.service\n"
}

/// A job in a v2 tree as Slurm's cgroup/v2 plugin builds it: `job` is its directory
/// relative to the mount (the release's scope, slice and job naming), `steps` their
/// directories and CPU time (µs), each with its slurmstepd's `slurm/` and a task.
pub(crate) fn v2_tree(
    root: &Path,
    job: &str,
    cpus: &str,
    max: &str,
    job_us: u64,
    steps: &[(&str, u64)],
) {
    write(
        &root.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    );
    let job_dir = root.join(job);
    let scope = job_dir.parent().expect("scope");
    write(&scope.join("system/cgroup.procs"), "");
    let stat = |us: u64| format!("usage_usec {us}\nuser_usec {us}\nsystem_usec 0\n");
    write(&job_dir.join("cpu.stat"), &stat(job_us));
    write(&job_dir.join("cpuset.cpus.effective"), &format!("{cpus}\n"));
    write(&job_dir.join("memory.max"), &format!("{max}\n"));
    for (step, us) in steps {
        write(&job_dir.join(step).join("cpu.stat"), &stat(*us));
        write(&job_dir.join(step).join("slurm/cpu.stat"), &stat(0));
        write(&job_dir.join(step).join("user/task_0/cpu.stat"), &stat(*us));
    }
}

/// Under cgroup v1 the slurmstepd sits at its job's level in the freezer hierarchy and
/// at its step's in the others; 26.05 names job directories by SLUID.
#[test]
fn a_processs_job_is_the_job_directory_that_holds_it() {
    let v1 = JobDir::of_stepd(
        "7:freezer:/slurm/uid_1000/job_12\n4:cpuset:/slurm/uid_1000/job_12/step_0\n",
    );
    assert_eq!(v1.len(), 2);
    let sluid = JobDir::of_stepd("0::/system.slice/slurmstepd.scope/s1a2b3c4d5e6f7/step_0/slurm\n");
    let jobs = [(&v1[0], 12), (&v1[1], 12), (&sluid[0], 13)];
    let of = |text: &str| jobs.iter().find(|(d, _)| d.holds(text)).map(|(_, j)| *j);
    assert_eq!(
        of("7:freezer:/slurm/uid_1000/job_12/step_0/task_0\n"),
        Some(12)
    );
    assert_eq!(
        of("0::/system.slice/slurmstepd.scope/s1a2b3c4d5e6f7/step_0/user/task_1\n"),
        Some(13)
    );
    // a name that only begins like a job's directory is not inside it
    assert_eq!(of("7:freezer:/slurm/uid_1000/job_123/step_0\n"), None);
    assert_eq!(of("0::/system.slice/slurmstepd.scope/system\n"), None);
    // a slurmstepd still outside its step (v2's system/) tells no job directory
    assert!(JobDir::of_stepd("0::/system.slice/slurmstepd.scope/system\n").is_empty());
}

/// Issue 53: a process its owner moved into a leftover directory of an ended job is in no
/// present job's directory, and still below its owner's `uid_<U>`, at the level of the
/// present jobs' owners, whatever it named the directories below; a process outside
/// Slurm's tree, or a job without a user level (v2), tells no owner.
#[test]
fn a_process_out_of_every_job_is_its_owners_by_the_uid_level() {
    let stepd = |job: &str| v1_stepd(job, "step_0", true);
    let theirs = JobDir::of_stepd(&stepd("/slurm/uid_1000/job_7"));
    assert!(theirs.iter().all(|d| d.owner() == Some(1000)));
    let neighbours = JobDir::of_stepd(&stepd("/slurm/uid_2000/job_8"));
    // moved into `hide` of ended job 5 in every hierarchy, one named like another's
    let hidden = "12:freezer:/slurm/uid_1000/job_5/step_batch/hide/uid_2000\n\
                  4:cpuacct:/slurm/uid_1000/job_5/step_batch/hide\n\
                  3:cpuset:/slurm/uid_1000/job_5/step_batch/hide\n\
                  10:memory:/slurm/uid_1000/job_5/step_batch/hide/task_0\n\
                  1:name=systemd:/system.slice/slurmd.service\n";
    for dir in theirs.iter().chain(&neighbours) {
        assert!(!dir.holds(hidden));
        assert_eq!(dir.user_of(hidden), Some((1000, Some(5))), "{dir:?}");
    }
    let outside = "12:freezer:/\n4:cpuacct:/user.slice/uid_2000\n3:cpuset:/\n";
    assert!(neighbours.iter().all(|d| d.user_of(outside).is_none()));
    // below the user level but in no job's directory
    let loose = "12:freezer:/slurm/uid_1000/job_x/y\n";
    assert_eq!(neighbours[0].user_of(loose), Some((1000, None)));
    // the user level itself names no process's owner: only below it
    assert!(
        neighbours
            .iter()
            .all(|d| d.user_of("12:freezer:/slurm/uid_1000\n").is_none())
    );
    let v2 = JobDir::of_stepd("0::/system.slice/slurmstepd.scope/job_7/step_0/slurm\n");
    assert_eq!(v2[0].owner(), None);
    assert_eq!(
        v2[0].user_of("0::/system.slice/slurmstepd.scope/uid_1000/x\n"),
        None
    );
    assert_eq!(uid_dir("uid_+5"), None);
}

#[test]
fn cpu_lists_are_counted() {
    assert_eq!(count_cpus("0-3,8,10-11"), 7);
    assert_eq!(count_cpus("1"), 1);
    assert_eq!(count_cpus(""), 0);
}

#[test]
fn a_v1_tree_gives_cpus_memory_and_usage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let steps = [("step_extern", 10), ("step_batch", 4_000)];
    let job = v1_tree(tmp.path(), "slurm", 42, "0-1", 1 << 30, 5_000, &steps);
    let other = v1_tree(
        tmp.path(),
        "slurm",
        43,
        "2",
        9_223_372_036_854_771_712,
        7,
        &steps,
    );
    let tree = CgroupTree::from_path(tmp.path()).expect("v1");
    let mut batch = tree
        .step_cgroup(&v1_stepd(&job, "step_batch", true), StepId::BATCH)
        .expect("batch");
    assert_eq!(batch.job, Path::new("slurm/uid_1000/job_42"));
    assert_eq!(batch.step, Path::new("slurm/uid_1000/job_42/step_batch"));
    assert_eq!(
        batch.job_counters(),
        Some(JobCounters {
            cpus: 2,
            memory: Some(1 << 30),
            usage_ns: 5_000
        })
    );
    assert_eq!(batch.step_usage_ns(), Some(4_000));
    // the slurmstepd in the job's freezer cgroup only (no cpuset or memory
    // constraint): its step's directory is `step_<id>` in its job's
    let unconstrained = tree
        .step_cgroup(&v1_stepd(&job, "step_batch", false), StepId::BATCH)
        .expect("from the freezer's job directory");
    assert_eq!(unconstrained.step, batch.step);
    assert_eq!(unconstrained.job, batch.job);
    // another step's slurmstepd
    assert_eq!(
        tree.step_cgroup(&v1_stepd(&job, "step_batch", true), StepId(0)),
        None
    );
    let unlimited = tree
        .step_cgroup(&v1_stepd(&other, "step_batch", true), StepId::BATCH)
        .and_then(|mut c| c.job_counters())
        .map(|c| c.memory);
    assert_eq!(unlimited, Some(None));
}

#[test]
fn a_v2_tree_gives_cpus_memory_and_usage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = "system.slice/slurmstepd.scope/job_7";
    v2_tree(tmp.path(), job, "0-3", "max", 1_500, &[("step_0", 1_200)]);
    let tree = CgroupTree::from_path(tmp.path()).expect("v2");
    let stepd = format!("0::/{job}/step_0/slurm\n");
    let mut step = tree.step_cgroup(&stepd, StepId(0)).expect("step 0");
    assert_eq!(step.job, Path::new(job));
    assert_eq!(
        step.job_counters(),
        Some(JobCounters {
            cpus: 4,
            memory: None,
            usage_ns: 1_500_000
        })
    );
    assert_eq!(step.step_usage_ns(), Some(1_200_000));
    // a task's cgroup is never taken
    let task = format!("0::/{job}/step_0/user/task_0\n");
    assert_eq!(tree.step_cgroup(&task, StepId(0)), None);
    // a new slurmstepd waits in the scope's system/ first
    let parked = "0::/system.slice/slurmstepd.scope/system\n";
    assert_eq!(tree.step_cgroup(parked, StepId(0)), None);
    // under v2 only the unified line counts
    let v1_line = format!("4:cpu,cpuacct:/{job}/step_0\n0::/\n");
    assert_eq!(tree.step_cgroup(&v1_line, StepId(0)), None);
    // the CPUs and memory limit are read again every LIMITS_EVERY samples, the CPU
    // time at each
    write(&tmp.path().join(job).join("cpuset.cpus.effective"), "0-1");
    write(&tmp.path().join(job).join("cpu.stat"), "usage_usec 2\n");
    let counters = step.job_counters().expect("counters");
    assert_eq!((counters.cpus, counters.usage_ns), (4, 2_000));
    for _ in 2..LIMITS_EVERY {
        assert_eq!(step.job_counters().map(|c| c.cpus), Some(4));
    }
    assert_eq!(step.job_counters().map(|c| c.cpus), Some(2));
}

/// Where a job's owner owns its step directories (v1 before 23.02), a task can make
/// `step_batch/hide/step_0` and sit there: the step's directory is still where Slurm
/// put the slurmstepd, `<job>/step_0`, never the deepest look-alike.
#[test]
fn a_steps_directory_is_where_its_slurmstepd_is_not_a_look_alike_below() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let steps = [("step_batch", 100), ("step_0", 200)];
    let job = v1_tree(tmp.path(), "slurm", 42, "0-1", 1 << 30, 300, &steps);
    let hidden = format!("{job}/step_batch/hide/step_0");
    write(
        &tmp.path()
            .join("cpu,cpuacct")
            .join(&hidden[1..])
            .join("cpuacct.usage"),
        "7\n",
    );
    let tree = CgroupTree::from_path(tmp.path()).expect("v1");
    // the task's own cgroup names the look-alike deepest: it is not read
    let task = format!("12:freezer:{hidden}\n4:cpu,cpuacct:{hidden}\n");
    assert_eq!(tree.step_cgroup(&task, StepId(0)), None);
    // a slurmstepd is taken only at its step's or its job's level
    let mut step = tree
        .step_cgroup(&v1_stepd(&job, "step_0", true), StepId(0))
        .expect("step 0");
    assert_eq!(step.job, Path::new("slurm/uid_1000/job_42"));
    assert_eq!(step.step_usage_ns(), Some(200));
    let deeper = format!("11:cpuset:{hidden}\n10:memory:{hidden}\n");
    assert_eq!(tree.step_cgroup(&deeper, StepId(0)), None);
}

/// A step directory its job's owner owns: the job's CPU time is also read at the
/// owner's directory (`uid_<U>`, root's), which the owner's processes cannot leave.
#[test]
fn an_owners_step_directory_has_the_job_read_at_the_owners_level() {
    use nix::unistd::{Uid, chown};
    if !crate::test_support::root_or_skip("giving a directory to another user") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = v1_tree(
        tmp.path(),
        "slurm",
        42,
        "0-1",
        1 << 30,
        300,
        &[("step_0", 200)],
    );
    let user = tmp.path().join("cpu,cpuacct/slurm/uid_1000");
    write(&user.join("cpuacct.usage"), "5000\n");
    let tree = CgroupTree::from_path(tmp.path()).expect("v1");
    let stepd = v1_stepd(&job, "step_0", true);
    let mut roots = tree.step_cgroup(&stepd, StepId(0)).expect("step 0");
    assert_eq!(roots.user_usage_ns(), None);
    // Slurm 22.05 gives the step's directories to the job's owner, in every controller
    for c in ["cpuset", "freezer", "cpu,cpuacct"] {
        let dir = tmp.path().join(c).join(&job[1..]).join("step_0");
        chown(&dir, Some(Uid::from_raw(1000)), None).expect("chown");
    }
    let mut owned = tree.step_cgroup(&stepd, StepId(0)).expect("step 0");
    assert_eq!(owned.user_usage_ns(), Some((user.as_path(), 5000)));
    // the owner's level must be root's: one the user owns is no bound
    chown(&user, Some(Uid::from_raw(1000)), None).expect("chown");
    let mut unbounded = tree.step_cgroup(&stepd, StepId(0)).expect("step 0");
    assert_eq!(unbounded.user_usage_ns(), None);
}

#[test]
fn no_cgroups_is_an_error_naming_the_root() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let e = CgroupTree::from_path(tmp.path()).expect_err("empty");
    assert!(e.to_string().contains(&tmp.path().display().to_string()));
}
