//! What Slurm's cgroups say a job holds and has used, in cgroup v1 and v2 layouts.
//!
//! v1 (task/cgroup, proctrack/cgroup): `<root>/<controller>/slurm[_<node>]/uid_U/job_J/step_S`,
//! the same relative path under `cpuacct` (`cpuacct.usage`, ns), `cpuset` (`cpuset.cpus`) and
//! `memory` (`memory.limit_in_bytes`). v2: `<root>/system.slice/[<node>_]slurmstepd.scope/
//! job_J/step_S`, with `cpu.stat` (`usage_usec`), `cpuset.cpus.effective` and `memory.max`.

use std::fs;
use std::path::{Path, PathBuf};

use super::StepId;

/// v1 names of the controller holding `cpuacct.usage` (Debian mounts it with `cpu`).
const CPUACCT: [&str; 3] = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"];
/// A v1 memory limit at or above this is "no limit" (the kernel's is 2^63 - page size).
const V1_UNLIMITED: u64 = 1 << 62;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no cgroup tree of Slurm's under {root}: neither cgroup v2 (cgroup.controllers) nor a v1 cpuacct controller"
)]
pub struct NoCgroups {
    pub root: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    V1,
    V2,
}

/// The cgroup mount that Slurm's task/cgroup and proctrack/cgroup use.
#[derive(Debug, Clone)]
pub struct CgroupTree {
    root: PathBuf,
    layout: Layout,
    /// v1: the cpuacct controller's directory.
    cpuacct: PathBuf,
}

/// What a job holds, and its CPU time so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobCounters {
    pub cpus: u32,
    pub memory: Option<u64>,
    pub usage_ns: u64,
}

impl CgroupTree {
    /// The tree mounted at `root` (`/sys/fs/cgroup`, Slurm's CgroupMountpoint).
    pub fn from_path(root: &Path) -> Result<Self, NoCgroups> {
        if root.join("cgroup.controllers").is_file() {
            return Ok(Self {
                root: root.to_path_buf(),
                layout: Layout::V2,
                cpuacct: PathBuf::new(),
            });
        }
        CPUACCT
            .iter()
            .map(|c| root.join(c))
            .find(|dir| dir.join("cpuacct.usage").is_file())
            .map(|cpuacct| Self {
                root: root.to_path_buf(),
                layout: Layout::V1,
                cpuacct,
            })
            .ok_or_else(|| NoCgroups {
                root: root.display().to_string(),
            })
    }

    /// The job's directory relative to a controller (v1) or the root (v2).
    fn job_dir(&self, job: u32) -> Option<PathBuf> {
        let name = format!("job_{job}");
        match self.layout {
            Layout::V1 => subdirs(&self.cpuacct, "slurm")
                .into_iter()
                .flat_map(|slurm| subdirs(&slurm, "uid_"))
                .map(|uid| uid.join(&name))
                .find(|dir| dir.is_dir())
                .and_then(|dir| dir.strip_prefix(&self.cpuacct).ok().map(Path::to_path_buf)),
            Layout::V2 => subdirs(&self.root.join("system.slice"), "")
                .into_iter()
                .filter(|d| d.to_string_lossy().ends_with("slurmstepd.scope"))
                .map(|scope| scope.join(&name))
                .find(|dir| dir.is_dir())
                .and_then(|dir| dir.strip_prefix(&self.root).ok().map(Path::to_path_buf)),
        }
    }

    fn usage_ns(&self, dir: &Path) -> Option<u64> {
        match self.layout {
            Layout::V1 => read_u64(&self.cpuacct.join(dir).join("cpuacct.usage")),
            Layout::V2 => {
                let stat = fs::read_to_string(self.root.join(dir).join("cpu.stat")).ok()?;
                stat.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|us| us * 1000)
            }
        }
    }

    /// The job's cgroup; `None` when it is not (or no longer) there. Found once per
    /// sample: its steps' are beside it.
    pub fn job(&self, job: u32) -> Option<JobCgroup<'_>> {
        self.job_dir(job).map(|dir| JobCgroup { tree: self, dir })
    }
}

/// One job's cgroup in a [`CgroupTree`].
pub struct JobCgroup<'a> {
    tree: &'a CgroupTree,
    /// Relative to a controller (v1) or the root (v2).
    dir: PathBuf,
}

impl JobCgroup<'_> {
    /// The job's CPUs, memory limit and CPU time; `None` when its CPU time cannot be read.
    pub fn counters(&self) -> Option<JobCounters> {
        let (tree, dir) = (self.tree, &self.dir);
        let usage_ns = tree.usage_ns(dir)?;
        let (cpus, memory) = match tree.layout {
            Layout::V1 => (
                read_text(&tree.root.join("cpuset").join(dir).join("cpuset.cpus")),
                read_u64(
                    &tree
                        .root
                        .join("memory")
                        .join(dir)
                        .join("memory.limit_in_bytes"),
                )
                .filter(|&m| m < V1_UNLIMITED),
            ),
            Layout::V2 => (
                read_text(&tree.root.join(dir).join("cpuset.cpus.effective")),
                read_u64(&tree.root.join(dir).join("memory.max")),
            ),
        };
        Some(JobCounters {
            cpus: cpus.as_deref().map(count_cpus).unwrap_or(0),
            memory,
            usage_ns,
        })
    }

    /// The step's CPU time so far.
    pub fn step_usage_ns(&self, step: StepId) -> Option<u64> {
        self.tree.usage_ns(&self.dir.join(step.cgroup_name()))
    }
}

fn subdirs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

fn read_text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|t| t.trim().to_string())
}

fn read_u64(path: &Path) -> Option<u64> {
    read_text(path)?.parse().ok()
}

/// The number of CPUs in a cpuset list ("0-3,8,10-11").
pub fn count_cpus(list: &str) -> u32 {
    list.split(',')
        .filter_map(|part| {
            let part = part.trim();
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                    b.checked_sub(a).map(|n| n + 1)
                }
                None => part.parse::<u32>().ok().map(|_| 1),
            }
        })
        .sum()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    /// A v1 tree as Slurm's cgroup/v1 plugin builds it, Debian's controller names included.
    pub fn v1_tree(
        root: &Path,
        job: u32,
        cpus: &str,
        limit: u64,
        job_ns: u64,
        steps: &[(&str, u64)],
    ) {
        write(&root.join("cpu,cpuacct/cpuacct.usage"), "999999999\n");
        let rel = format!("slurm/uid_1000/job_{job}");
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
        for (step, ns) in steps {
            write(
                &root
                    .join("cpu,cpuacct")
                    .join(&rel)
                    .join(step)
                    .join("cpuacct.usage"),
                &format!("{ns}\n"),
            );
        }
    }

    pub fn v2_tree(
        root: &Path,
        job: u32,
        cpus: &str,
        max: &str,
        job_us: u64,
        steps: &[(&str, u64)],
    ) {
        write(
            &root.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        );
        let job_dir = root.join(format!("system.slice/slurmstepd.scope/job_{job}"));
        let stat = |us: u64| format!("usage_usec {us}\nuser_usec {us}\nsystem_usec 0\n");
        write(&job_dir.join("cpu.stat"), &stat(job_us));
        write(&job_dir.join("cpuset.cpus.effective"), &format!("{cpus}\n"));
        write(&job_dir.join("memory.max"), &format!("{max}\n"));
        for (step, us) in steps {
            write(&job_dir.join(step).join("cpu.stat"), &stat(*us));
        }
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
        v1_tree(
            tmp.path(),
            42,
            "0-1",
            1 << 30,
            5_000,
            &[("step_extern", 10), ("step_batch", 4_000)],
        );
        v1_tree(tmp.path(), 43, "2", 9_223_372_036_854_771_712, 7, &[]);
        let tree = CgroupTree::from_path(tmp.path()).expect("v1");
        let job = tree.job(42).expect("job 42");
        let counters = job.counters().expect("counters");
        assert_eq!(
            counters,
            JobCounters {
                cpus: 2,
                memory: Some(1 << 30),
                usage_ns: 5_000
            }
        );
        assert_eq!(job.step_usage_ns(StepId::BATCH), Some(4_000));
        assert_eq!(job.step_usage_ns(StepId::EXTERN), Some(10));
        assert_eq!(job.step_usage_ns(StepId(0)), None);
        let unlimited = tree.job(43).and_then(|j| j.counters()).map(|c| c.memory);
        assert_eq!(unlimited, Some(None));
        assert!(tree.job(44).is_none());
    }

    #[test]
    fn a_v2_tree_gives_cpus_memory_and_usage() {
        let tmp = tempfile::tempdir().expect("tempdir");
        v2_tree(tmp.path(), 7, "0-3", "max", 1_500, &[("step_0", 1_200)]);
        let tree = CgroupTree::from_path(tmp.path()).expect("v2");
        assert_eq!(
            tree.job(7).and_then(|j| j.counters()),
            Some(JobCounters {
                cpus: 4,
                memory: None,
                usage_ns: 1_500_000
            })
        );
        let job = tree.job(7).expect("job 7");
        assert_eq!(job.step_usage_ns(StepId(0)), Some(1_200_000));
    }

    #[test]
    fn no_cgroups_is_an_error_naming_the_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = CgroupTree::from_path(tmp.path()).expect_err("empty");
        assert!(e.to_string().contains(&tmp.path().display().to_string()));
    }
}
