//! What Slurm's cgroups say a job holds and has used, in cgroup v1 and v2 layouts.
//!
//! A step's cgroup is read from where its processes are (`/proc/<pid>/cgroup`, see
//! [`super::procs`]), never built from a naming convention: every release moves it
//! (26.05 names v2 job directories by SLUID unless `CgroupJobIdPaths=yes`, 25.11 adds
//! `CgroupSlice`, 24.11 roots the tree at init's cgroup, multiple-slurmd builds prefix the
//! node's name). What stays is the step's own directory, `step_<id>` (`step_batch`,
//! `step_extern`, ...), with the job's directory as its parent, in every release of
//! both plugins (`xcgroup_create_hierarchy()` in cgroup/v1, `cgroup_p_step_create()` in
//! cgroup/v2). A process of the step sits in that directory or below it:
//!
//! - v2 (one line `0::<path>`): slurmstepd in `<step>/slurm`, tasks in
//!   `<step>/user/task_<n>` (a new slurmstepd first parks in `<scope>/system`, so a step
//!   is found at a later sample).
//! - v1 (a line per hierarchy, `<id>:<controllers>:<path>`): slurmstepd in the step's
//!   cpuset and memory cgroups (task/cgroup) and the job's freezer cgroup, never in cpuacct;
//!   tasks in `<step>/task_<n>` of cpuacct (jobacct_gather/cgroup) and in the step's freezer
//!   cgroup. Slurm builds the same relative path under each controller, so the path found
//!   in one names the step's directory in all.
//!
//! Paths in `/proc/<pid>/cgroup` are relative to the hierarchy's root, which is where
//! CgroupMountpoint (v2) or `<CgroupMountpoint>/<controller>` (v1) mounts it. Files read:
//! v1 `cpuacct.usage` (ns), `cpuset.cpus`, `memory.limit_in_bytes`; v2 `cpu.stat`
//! (`usage_usec`), `cpuset.cpus.effective`, `memory.max`.

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::StepId;

/// v1 names of the controller holding `cpuacct.usage` (Debian mounts it with `cpu`).
const CPUACCT: [&str; 3] = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"];
/// The v1 controllers Slurm builds its hierarchy under (`g_cg_name[]` in cgroup_v1.c):
/// a line of another hierarchy (`name=systemd`, `pids`) never holds a step.
const SLURM_V1_CONTROLLERS: [&str; 5] = ["cpuacct", "cpuset", "memory", "freezer", "devices"];
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
    /// The tree mounted at `root` (Slurm's CgroupMountpoint, `/sys/fs/cgroup` by default).
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

    /// The cgroup of `step` from the text of `/proc/<pid>/cgroup` of its slurmstepd, the one
    /// process Slurm places (as root) where the step is: `None` while it is not there yet
    /// (v2's `system/`, or the step's directory not made yet).
    ///
    /// Only the slurmstepd's own lines are taken, and only at the places Slurm puts it:
    /// its step's directory (v1's cpuset and memory when task/cgroup constrains them; v2's
    /// `<step>/slurm`) or its job's (v1's freezer, where the step's directory is
    /// `<job>/step_<id>`). A task's cgroup is never read: where Slurm gives a step's
    /// directories to the job's owner (v1 before 23.02, `RootOwnedCgroups=no`) a task can
    /// sit in a child it made, named like any step's.
    pub fn step_cgroup(&self, stepd_cgroup: &str, step: StepId) -> Option<StepCgroup> {
        let name = step.cgroup_name();
        let lines = lines(stepd_cgroup);
        let (mount, dir) = match self.layout {
            Layout::V2 => lines
                .filter(|(controllers, _)| controllers.is_empty())
                .find_map(|(_, path)| {
                    let parts = components(path);
                    let at = match parts[..] {
                        [.., s, "slurm"] if s == name => parts.len() - 2,
                        [.., s] if s == name => parts.len() - 1,
                        _ => return None,
                    };
                    stepd_step_dir(&parts, at).map(|d| (self.root.clone(), d))
                }),
            Layout::V1 => {
                let slurms: Vec<(&str, &str)> = lines
                    .filter(|(controllers, _)| {
                        controllers
                            .split(',')
                            .any(|c| SLURM_V1_CONTROLLERS.contains(&c))
                    })
                    .collect();
                let at_step = slurms.iter().find_map(|(controllers, path)| {
                    let parts = components(path);
                    let at = parts.len().checked_sub(1)?;
                    (parts[at] == name)
                        .then(|| stepd_step_dir(&parts, at))
                        .flatten()
                        .map(|d| (self.root.join(controllers), d))
                });
                at_step.or_else(|| {
                    slurms.iter().find_map(|(controllers, path)| {
                        let parts = components(path);
                        parts.last().filter(|c| is_job_dir(c))?;
                        let mut dir: PathBuf = parts.iter().collect();
                        dir.push(&name);
                        Some((self.root.join(controllers), dir))
                    })
                })
            }
        }?;
        // the step's directory exists once Slurm made it: until then it is not there yet
        let owner = fs::metadata(mount.join(&dir)).ok()?.uid();
        let job = dir.parent()?.to_path_buf();
        Some(self.files(dir, job, owner))
    }

    /// The counter files of a step directory and of its job's, `step` and `job` relative
    /// to the hierarchy's root; `owner`: who owns the step's directory.
    fn files(&self, step: PathBuf, job: PathBuf, owner: u32) -> StepCgroup {
        let (usage, cpus, memory) = match self.layout {
            Layout::V1 => (
                "cpuacct.usage",
                self.root.join("cpuset").join(&job).join("cpuset.cpus"),
                self.root
                    .join("memory")
                    .join(&job)
                    .join("memory.limit_in_bytes"),
            ),
            Layout::V2 => (
                "cpu.stat",
                self.root.join(&job).join("cpuset.cpus.effective"),
                self.root.join(&job).join("memory.max"),
            ),
        };
        let base = match self.layout {
            Layout::V1 => &self.cpuacct,
            Layout::V2 => &self.root,
        };
        // slurmd's own uid (root) owns what no user may change
        let slurmd = nix::unistd::geteuid().as_raw();
        let user = (owner != slurmd).then(|| self.user_level(base, &job, owner, slurmd));
        StepCgroup {
            layout: self.layout,
            step_usage: Counter::at(base.join(&step).join(usage)),
            job_usage: Counter::at(base.join(&job).join(usage)),
            job_cpus: Counter::at(cpus),
            job_memory: Counter::at(memory),
            user_usage: user
                .flatten()
                .map(|dir| Counter::at(base.join(&dir).join(usage))),
            limits: None,
            limits_age: 0,
            step,
            job,
        }
    }

    /// Where the CPU time of a job whose step directories are its owner's (`owner`, not
    /// root) is read so that none escapes: the job's parent, v1's `uid_<owner>`, which
    /// root owns. The owner can make children in their step directories, which outlive
    /// the step (Slurm's `rmdir` fails while a child exists), and move their processes
    /// into any of them, out of the job's directory; never out of `uid_<owner>`. `None`,
    /// and an error logged, where no such level is found: the job's own counter is read.
    fn user_level(&self, base: &Path, job: &Path, owner: u32, slurmd: u32) -> Option<PathBuf> {
        let parent = job.parent()?;
        let named = parent.file_name().and_then(|n| n.to_str()) == Some(&format!("uid_{owner}"));
        let root_owned = fs::metadata(base.join(parent)).is_ok_and(|m| m.uid() == slurmd);
        if named && root_owned {
            return Some(parent.to_path_buf());
        }
        log::error!(
            "the cgroup of job directory {} is user {owner}'s and no directory above it is \
             root's uid_{owner}: CPU time the user moves out of the job is not seen \
             (EnergyAttribution=shared splits the node by what is seen; set \
             RootOwnedCgroups=yes in cgroup.conf)",
            base.join(job).display()
        );
        None
    }
}

/// The lines of a `/proc/<pid>/cgroup`: `(controllers, path)` (cgroup v2's line has no
/// controllers).
fn lines(proc_cgroup: &str) -> impl Iterator<Item = (&str, &str)> {
    proc_cgroup
        .lines()
        .filter_map(|l| l.split_once(':')?.1.split_once(':'))
}

fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|p| !p.is_empty()).collect()
}

/// A job's directory in one cgroup hierarchy, where Slurm placed the job's slurmstepd:
/// which job a process belongs to is which job's directory holds it, as the kernel says,
/// whatever the process's parents, title or environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDir {
    controllers: String,
    path: Vec<String>,
}

impl JobDir {
    /// From a slurmstepd's `/proc/<pid>/cgroup`, in each hierarchy: the directory above its
    /// step's (`.../job_123/step_0`, 26.05's `.../s<SLUID>/step_0`), or its own where Slurm
    /// keeps it at the job's level (v1's freezer: `.../job_123`). None while it is elsewhere
    /// (v2's `system/` before its step's directory exists).
    pub fn of_stepd(proc_cgroup: &str) -> Vec<Self> {
        lines(proc_cgroup)
            .filter_map(|(controllers, path)| {
                let parts = components(path);
                let end = match parts.iter().position(|c| c.starts_with("step_")) {
                    Some(i) if i > 0 => i,
                    _ if parts.last().is_some_and(|c| is_job_dir(c)) => parts.len(),
                    _ => return None,
                };
                Some(Self {
                    controllers: controllers.to_string(),
                    path: parts[..end].iter().map(|c| c.to_string()).collect(),
                })
            })
            .collect()
    }

    /// Whether a process with `/proc/<pid>/cgroup` `proc_cgroup` is in this directory.
    pub fn holds(&self, proc_cgroup: &str) -> bool {
        lines(proc_cgroup).any(|(controllers, path)| {
            let parts = components(path);
            controllers == self.controllers
                && parts.len() >= self.path.len()
                && parts.iter().zip(&self.path).all(|(p, own)| p == own)
        })
    }
}

impl JobDir {
    /// The uid of the job's owner where Slurm keeps a user level: cgroup v1's `uid_<U>`
    /// directory, the job's parent; `None` where there is none (v2).
    pub fn owner(&self) -> Option<u32> {
        uid_dir(self.path.get(self.path.len().checked_sub(2)?)?)
    }

    /// The owner of a process in no present job's directory that is still below a user
    /// level of Slurm's tree beside this job's: the `U` of the `uid_<U>` directory at this
    /// job's user level in the process's path in the same hierarchy, and the job whose
    /// directory below it holds the process (`job_<N>`); `None` where the process is
    /// elsewhere or this job has no user level. Only root makes a directory at that level
    /// (its parent is Slurm's root, `slurm/`, which only root may write), or a job's below
    /// it: a process its owner moved into a leftover directory of their ended job (possible
    /// where Slurm gives the step directories to the owner: cgroup v1 before 23.02) is
    /// still below their `uid_<U>` and that job's directory, whatever names they gave the
    /// directories below.
    pub fn user_of(&self, proc_cgroup: &str) -> Option<(u32, Option<u32>)> {
        self.owner()?;
        let at = self.path.len() - 2;
        lines(proc_cgroup).find_map(|(controllers, path)| {
            let parts = components(path);
            let beside = controllers == self.controllers
                && parts.len() > at + 1
                && parts.iter().zip(&self.path[..at]).all(|(p, own)| p == own);
            let job = parts.get(at + 1).and_then(|j| j.strip_prefix("job_"));
            let job = job
                .filter(|_| is_job_dir(parts[at + 1]))
                .and_then(|j| j.parse().ok());
            beside.then(|| Some((uid_dir(parts[at])?, job))).flatten()
        })
    }
}

/// The `U` of a directory named `uid_<U>`.
fn uid_dir(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("uid_")?;
    match digits.bytes().all(|b| b.is_ascii_digit()) {
        true => digits.parse().ok(),
        false => None,
    }
}

fn is_job_dir(name: &str) -> bool {
    name.strip_prefix("job_")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The step's directory, relative (no leading `/`), at component `at` of a slurmstepd's
/// cgroup path: a step directory always has its job's above it.
fn stepd_step_dir(parts: &[&str], at: usize) -> Option<PathBuf> {
    (at > 0).then(|| parts[..=at].iter().collect())
}

/// A counter file kept open once it could be opened: a sample reads it with one `pread`
/// at offset 0 (which makes a cgroup file show its current value again), without a path
/// lookup or an allocation. Holding it does not keep Slurm from removing the cgroup; a
/// read then fails, the file is dropped and opened again (or not) at the next read.
#[derive(Debug)]
struct Counter {
    path: PathBuf,
    file: Option<File>,
}

/// Room for a limit's file: a cpuset list longer than this is counted from what fits.
const LIMIT_READ: usize = 4096;
/// Room for a CPU time's file, read at every sample for every step (a buffer zeroed per
/// read: 4 KiB of it cost about a tenth of a step's read): `cpuacct.usage` is at most 20
/// digits; `cpu.stat` is a few hundred bytes whose first line is `usage_usec`.
const USAGE_READ: usize = 256;

impl Counter {
    fn at(path: PathBuf) -> Self {
        Self { path, file: None }
    }

    /// `parse` of the file's first `N` bytes as text, trimmed; `None` when it cannot be
    /// read or parsed.
    fn read<const N: usize, T>(&mut self, parse: impl FnOnce(&str) -> Option<T>) -> Option<T> {
        if self.file.is_none() {
            // std opens with O_CLOEXEC: tasks slurmd starts never inherit it
            self.file = File::open(&self.path).ok();
        }
        let mut buf = [0u8; N];
        let read = self.file.as_ref()?.read_at(&mut buf, 0);
        let Ok(n) = read else {
            self.file = None;
            return None;
        };
        parse(std::str::from_utf8(&buf[..n]).ok()?.trim())
    }
}

/// The paths say which files; the handles are a cache.
impl PartialEq for Counter {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

/// A copy opens its own handle when first read.
impl Clone for Counter {
    fn clone(&self) -> Self {
        Self::at(self.path.clone())
    }
}

/// Where one step's and its job's counters are, resolved once and kept while the step
/// runs: reading them is a `pread` per file, no directory walk.
#[derive(Debug, Clone)]
pub struct StepCgroup {
    layout: Layout,
    /// The step's directory, relative to the hierarchy's root.
    pub step: PathBuf,
    /// The job's directory (the step's parent), relative to the hierarchy's root.
    pub job: PathBuf,
    step_usage: Counter,
    job_usage: Counter,
    job_cpus: Counter,
    job_memory: Counter,
    /// Where the job's owner owns its step directories: the CPU time of everything the
    /// owner runs under Slurm on the node, which the owner's processes cannot leave.
    user_usage: Option<Counter>,
    /// The job's CPUs and memory limit as last read, and how many samples ago: they are
    /// set when the job starts and seldom change, so they are read again every
    /// [`LIMITS_EVERY`] samples, not at each (a sample of a node with hundreds of jobs reads
    /// their CPU time only).
    limits: Option<(u32, Option<u64>)>,
    limits_age: u32,
}

/// How many samples a job's CPUs and memory limit are kept before they are read again.
const LIMITS_EVERY: u32 = 30;

/// The files say which cgroup; what was read from them is a cache.
impl PartialEq for StepCgroup {
    fn eq(&self, other: &Self) -> bool {
        (
            self.layout,
            &self.step,
            &self.job,
            &self.step_usage,
            &self.job_usage,
        ) == (
            other.layout,
            &other.step,
            &other.job,
            &other.step_usage,
            &other.job_usage,
        ) && (&self.job_cpus, &self.job_memory) == (&other.job_cpus, &other.job_memory)
    }
}

fn usage_ns(layout: Layout, counter: &mut Counter) -> Option<u64> {
    match layout {
        Layout::V1 => counter.read::<USAGE_READ, _>(|t| t.parse().ok()),
        Layout::V2 => counter.read::<USAGE_READ, _>(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                // a figure that does not fit in ns is no reading (it would wrap)
                .and_then(|us| us.checked_mul(1000))
        }),
    }
}

/// The CPU time so far of the cgroup at `dir` (absolute): v1's `cpuacct.usage`, else v2's
/// `cpu.stat`; `None` when neither can be read (the directory removed).
pub(crate) fn usage_ns_at(dir: &Path) -> Option<u64> {
    let v1 = dir.join("cpuacct.usage");
    match v1.exists() {
        true => usage_ns(Layout::V1, &mut Counter::at(v1)),
        false => usage_ns(Layout::V2, &mut Counter::at(dir.join("cpu.stat"))),
    }
}

impl StepCgroup {
    /// The job's CPUs, memory limit and CPU time; `None` when its CPU time cannot be read.
    pub fn job_counters(&mut self) -> Option<JobCounters> {
        let usage_ns = usage_ns(self.layout, &mut self.job_usage)?;
        self.limits_age += 1;
        let (cpus, memory) = match self.limits {
            Some(limits) if self.limits_age < LIMITS_EVERY => limits,
            _ => {
                let memory = self
                    .job_memory
                    .read::<LIMIT_READ, _>(|t| t.parse::<u64>().ok());
                let memory = match self.layout {
                    Layout::V1 => memory.filter(|&m| m < V1_UNLIMITED),
                    // "max" does not parse: no limit
                    Layout::V2 => memory,
                };
                let cpus = self
                    .job_cpus
                    .read::<LIMIT_READ, _>(|t| Some(count_cpus(t)))
                    .unwrap_or(0);
                self.limits = Some((cpus, memory));
                self.limits_age = 0;
                (cpus, memory)
            }
        };
        Some(JobCounters {
            cpus,
            memory,
            usage_ns,
        })
    }

    /// The step's CPU time so far.
    pub fn step_usage_ns(&mut self) -> Option<u64> {
        usage_ns(self.layout, &mut self.step_usage)
    }

    /// Where the job's owner owns its step directories: the owner's directory (relative to
    /// the hierarchy's root) and the CPU time so far of everything in it; `None` where the
    /// job's directory holds all its processes can use (root owns the steps').
    pub fn user_usage_ns(&mut self) -> Option<(&Path, u64)> {
        let counter = self.user_usage.as_mut()?;
        let usage = usage_ns(self.layout, counter)?;
        Some((counter.path.parent()?, usage))
    }
}

/// The number of CPUs in a cpuset list ("0-3,8,10-11"), saturating: a garbled list
/// (`0-4294967295`) must not wrap around to a few CPUs, nor panic.
pub fn count_cpus(list: &str) -> u32 {
    list.split(',')
        .filter_map(|part| {
            let part = part.trim();
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                    b.checked_sub(a).map(|n| n.saturating_add(1))
                }
                None => part.parse::<u32>().ok().map(|_| 1),
            }
        })
        .fold(0, u32::saturating_add)
}

#[cfg(test)]
pub(crate) mod tests;
