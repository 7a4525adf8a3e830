//! The cgroups Slurm makes for a cluster's jobs (cgroup v1: `<controller>/slurm/uid_U/
//! job_J/...` under `CgroupMountpoint`; cgroup v2: the nodes' own subtrees of this
//! machine's unified hierarchy, [`v2_root`]), removed when the cluster goes down.
//!
//! A slurmstepd removes its job's directories when the job ends, but not when it is
//! killed (a test that kills slurmd, a cluster taken down mid-job). Job ids come again
//! with a slot, and a job whose id finds its earlier run's directories can fail to start:
//! Slurm's write of the job's `cpuset.cpus` fails with EBUSY when a leftover step
//! directory holds a CPU outside it (the kernel keeps a child's CPUs within its parent's),
//! and the node drains. Only the job directories of the cluster's own job ids are removed:
//! `slurm/` and `uid_U/` are shared with the clusters running beside it.

use std::fs;
use std::io::ErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the tests' cgroup.conf mounts Slurm's cgroups ([`super::cgroup_v1_conf`]).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// This machine's cgroup v2 (unified) hierarchy, beside the v1 controllers' at
/// [`CGROUP_ROOT`]. It holds no controller (they are bound to v1), but every cgroup in it
/// counts its CPU time (`cpu.stat`) and can be frozen and killed, which is all Slurm's
/// cgroup/v2 with proctrack/cgroup needs.
pub const CGROUP_V2_HOST: &str = "/sys/fs/cgroup/unified";

/// The subtree of [`CGROUP_V2_HOST`] whose `n<K>` children are the cgroup v2 roots of a
/// cluster's nodes in slot `slot` (a cgroup namespace each, ci/cluster-lib/node-start.sh):
/// the slot makes it the cluster's own while it runs.
pub fn v2_root(slot: u32) -> PathBuf {
    Path::new(CGROUP_V2_HOST).join(format!("rust-energy-test-slot{slot}"))
}

/// Removes a cluster's cgroup v2 subtree ([`v2_root`]) and everything Slurm made in it,
/// once its processes are gone; says what stays.
pub fn remove_v2_root(root: &Path) {
    if !root.exists() {
        return;
    }
    let deadline = Instant::now() + BUSY_WAIT;
    loop {
        match remove_tree(root) {
            Err(e) if e.kind() == ErrorKind::ResourceBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                eprintln!(
                    "cluster: cannot remove the cgroup v2 subtree {}: {e}",
                    root.display()
                );
                return;
            }
            Ok(()) => return,
        }
    }
}

/// How long a directory may stay busy: its processes (killed just before) are leaving it.
const BUSY_WAIT: Duration = Duration::from_secs(3);

/// Removes the job directories of jobs `jobs` under every controller's `slurm*/uid_*/`
/// in `root`; says which stay (in use after `BUSY_WAIT`, or not removable).
pub fn remove_job_cgroups(root: &Path, jobs: &Range<u32>) {
    let deadline = Instant::now() + BUSY_WAIT;
    loop {
        let left = job_dirs(root, jobs)
            .into_iter()
            .filter_map(|dir| remove_tree(&dir).err().map(|e| (dir, e)))
            .collect::<Vec<_>>();
        let busy = left
            .iter()
            .any(|(_, e)| e.kind() == ErrorKind::ResourceBusy);
        if left.is_empty() || !busy || Instant::now() >= deadline {
            for (dir, e) in left {
                eprintln!(
                    "cluster: cannot remove Slurm's cgroup {}: {e}",
                    dir.display()
                );
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The directories `root/<controller>/slurm*/uid_*/job_<id>` of ids in `jobs`.
fn job_dirs(root: &Path, jobs: &Range<u32>) -> Vec<PathBuf> {
    let subdirs = |dir: &Path, prefix: &'static str| {
        fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(move |e| e.file_name().to_string_lossy().starts_with(prefix))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
    };
    let ours = |dir: &Path| {
        dir.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("job_"))
            .and_then(|id| id.parse::<u32>().ok())
            .is_some_and(|id| jobs.contains(&id))
    };
    subdirs(root, "")
        .flat_map(|controller| subdirs(&controller, "slurm").collect::<Vec<_>>())
        .flat_map(|slurm| subdirs(&slurm, "uid_").collect::<Vec<_>>())
        .flat_map(|uid| subdirs(&uid, "job_").collect::<Vec<_>>())
        .filter(|job| ours(job))
        .collect()
}

/// Removes a cgroup directory and the ones within it, deepest first (a cgroup's own files
/// go with it; `rmdir` is the only removal it takes).
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        done => done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over plain directories laid out as Slurm lays its cgroups: the cluster's jobs go
    /// with their steps and tasks; other clusters' jobs and the shared parents stay.
    #[test]
    fn only_the_clusters_own_job_directories_go() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let made = [
            "cpuset/slurm/uid_0/job_30001/step_batch/task_0",
            "cpuset/slurm/uid_0/job_30002/step_extern",
            "memory/slurm/uid_1000/job_30009/step_0",
            "freezer/slurm_n1/uid_0/job_30001",
            "cpuset/slurm/uid_0/job_40001/step_batch",
            "cpuset/slurm/uid_0/job_3000",
            "cpuset/other/uid_0/job_30001",
        ];
        for dir in made {
            fs::create_dir_all(root.join(dir)).expect("dir");
        }
        remove_job_cgroups(root, &(30_001..40_001));
        let exists = |dir: &str| root.join(dir).exists();
        for gone in [
            "cpuset/slurm/uid_0/job_30001",
            "cpuset/slurm/uid_0/job_30002",
            "memory/slurm/uid_1000/job_30009",
            "freezer/slurm_n1/uid_0/job_30001",
        ] {
            assert!(!exists(gone), "{gone}");
        }
        for kept in [
            "cpuset/slurm/uid_0",
            "memory/slurm/uid_1000",
            "cpuset/slurm/uid_0/job_40001/step_batch",
            "cpuset/slurm/uid_0/job_3000",
            "cpuset/other/uid_0/job_30001",
        ] {
            assert!(exists(kept), "{kept}");
        }
    }
}
