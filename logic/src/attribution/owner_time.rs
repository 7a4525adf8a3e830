//! CPU time a job's owner moved out of the job's cgroup, given back to the owner's jobs.
//!
//! Where Slurm gives a step's cgroup directories to the job's owner (cgroup v1 before
//! 23.02, or `RootOwnedCgroups=no`), the owner can make a child in one, which outlives the
//! step, and move their processes there: their CPU time then leaves the job's directory,
//! and a shared node's split would charge the neighbours for it. It never leaves the
//! owner's `uid_<U>` directory, which root owns ([`super::cgroup::StepCgroup::user_usage_ns`]).
//! So at each sample, what the owner's directory used beyond what the owner's present jobs
//! show is split among those jobs by the CPUs they hold: the owner pays for it, never a
//! neighbour.
//!
//! A process in a leftover directory outlives the job (it also left the job's freezer
//! cgroup, which Slurm kills the job's processes by), and goes on after its owner's last
//! job on the node has ended. An owner whose jobs have all gone is not forgotten while
//! their directory stays (Slurm's `rmdir` fails while a leftover child exists): what it
//! uses then is no job's, charged to no job as a GPU's use by no job is
//! ([`super::model::split_node`]), never the neighbours'; slurmd logs the owner and the
//! leftover directories holding processes, once each time the owner's jobs have gone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One job's CPU time at a sample, and its owner's directory's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwnerSample<'a> {
    pub job: u32,
    pub cpus: u32,
    /// The job's directory's CPU time so far (ns).
    pub job_ns: u64,
    /// The owner's directory and its CPU time so far (ns).
    pub owner: (&'a Path, u64),
}

/// What one owner's directory and jobs showed at the last sample.
#[derive(Debug, Default)]
struct Last {
    owner_ns: u64,
    /// The owner's jobs at the last sample: none once they have all gone.
    jobs: HashMap<u32, u64>,
    /// The CPU time given to each job so far.
    credit: HashMap<u32, u64>,
    /// Whether the owner's use with no job present was logged since their jobs went.
    said: bool,
}

/// What [`OwnerTime::credit`] found at a sample.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Credit {
    /// Each sampled job's CPU time given back so far (ns, to add to its directory's).
    pub jobs: HashMap<u32, u64>,
    /// The CPU time used since the last sample in the directories of owners with no job
    /// present (ns): no job's.
    pub unowned_ns: u64,
}

/// The CPU time given back to each owner's jobs, per owner's directory.
#[derive(Debug, Default)]
pub(crate) struct OwnerTime {
    owners: HashMap<PathBuf, Last>,
}

impl OwnerTime {
    /// Each sampled job's CPU time given back so far, and what owners with no job in
    /// `samples` used since the last sample, their directories' CPU time read by `read`
    /// (an owner whose directory cannot be read, removed by Slurm, is forgotten).
    pub(crate) fn credit(
        &mut self,
        samples: &[OwnerSample],
        mut read: impl FnMut(&Path) -> Option<u64>,
    ) -> Credit {
        let mut by_owner: HashMap<&Path, Vec<&OwnerSample>> = HashMap::new();
        for s in samples {
            by_owner.entry(s.owner.0).or_default().push(s);
        }
        let mut unowned_ns = 0u64;
        self.owners.retain(|dir, last| {
            if by_owner.contains_key(dir.as_path()) {
                return true;
            }
            let Some(owner_ns) = read(dir) else {
                return false;
            };
            // a directory made anew (its counter went back) sets the base
            let used = owner_ns.saturating_sub(last.owner_ns);
            if !last.jobs.is_empty() {
                last.jobs.clear();
                last.credit.clear();
                last.said = false;
            }
            last.owner_ns = owner_ns;
            // the first sample after the jobs went also counts their last moments: said
            // once a leftover directory is found holding a process
            if used > 0 && !last.said {
                last.said = said_unowned(dir, used);
            }
            unowned_ns = unowned_ns.saturating_add(used);
            true
        });
        let mut credits = HashMap::new();
        for (dir, jobs) in by_owner {
            // the owner's counter is read after its jobs': the largest figure of the sample
            let owner_ns = jobs.iter().map(|s| s.owner.1).max().unwrap_or(0);
            let known = self.owners.contains_key(dir);
            let last = self.owners.entry(dir.to_path_buf()).or_default();
            let mut credit: HashMap<u32, u64> = jobs
                .iter()
                .map(|s| (s.job, last.credit.get(&s.job).copied().unwrap_or(0)))
                .collect();
            // a first sample, or a directory made anew (its counter went back), sets the
            // base; an owner back after their jobs had gone gives the new jobs what the
            // directory used beyond what they show
            if known && owner_ns >= last.owner_ns {
                let added = unexplained(owner_ns - last.owner_ns, &jobs, &last.jobs);
                let parts = by_cpus(added, &jobs);
                for (s, part) in jobs.iter().zip(parts) {
                    *credit.entry(s.job).or_default() += part;
                }
            }
            *last = Last {
                owner_ns,
                jobs: jobs.iter().map(|s| (s.job, s.job_ns)).collect(),
                credit: credit.clone(),
                said: false,
            };
            credits.extend(credit);
        }
        Credit {
            jobs: credits,
            unowned_ns,
        }
    }
}

/// What the owner's directory used over the interval (`owner_delta`) beyond what the jobs
/// show: a job seen before by its growth, a job new to the sample by all it has used (it
/// may have run before, when the owner's directory already counted it).
fn unexplained(owner_delta: u64, jobs: &[&OwnerSample], before: &HashMap<u32, u64>) -> u64 {
    let explained = jobs
        .iter()
        .map(|s| match before.get(&s.job) {
            Some(&b) => s.job_ns.saturating_sub(b),
            None => s.job_ns,
        })
        .fold(0u64, u64::saturating_add);
    owner_delta.saturating_sub(explained)
}

/// `ns` split among `jobs` by the CPUs each holds (equally when none says), in whole ns
/// that add up to `ns`.
fn by_cpus(ns: u64, jobs: &[&OwnerSample]) -> Vec<u64> {
    let weights: Vec<u128> = if jobs.iter().any(|s| s.cpus > 0) {
        jobs.iter().map(|s| u128::from(s.cpus)).collect()
    } else {
        vec![1; jobs.len()]
    };
    let total: u128 = weights.iter().sum();
    let mut parts: Vec<u64> = weights
        .iter()
        .map(|w| u64::try_from(u128::from(ns) * w / total).unwrap_or(u64::MAX))
        .collect();
    // the rounding's few ns go to the first job
    let given: u64 = parts.iter().fold(0, |a, p| a.saturating_add(*p));
    if let Some(first) = parts.first_mut() {
        *first = first.saturating_add(ns.saturating_sub(given));
    }
    parts
}

/// Logs that the owner of `dir` (`uid_<U>`) has no job on the node and used `used_ns` of
/// CPU time there since the last sample, naming the directories below it that hold
/// processes (the leftovers they hide in); whether any was found (and so said).
fn said_unowned(dir: &Path, used_ns: u64) -> bool {
    let owner = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut budget = MAX_SEEN;
    leftovers(dir, 0, &mut budget, &mut found);
    if found.is_empty() {
        return false;
    }
    let shown: Vec<String> = found
        .iter()
        .take(MAX_NAMED)
        .map(|d| d.display().to_string())
        .collect();
    log::warn!(
        "{owner} has no job on this node, yet its processes used {:.2} s of CPU time in \
         {} since the last sample, from leftover cgroup directories of its ended jobs: \
         {}{}. Their CPU time is charged to no job (Slurm gave the jobs' step directories \
         to their owner: cgroup v1 before 23.02, or RootOwnedCgroups=no; set \
         RootOwnedCgroups=yes)",
        used_ns as f64 / 1e9,
        dir.display(),
        shown.join(", "),
        if found.len() > MAX_NAMED {
            format!(" and {} more", found.len() - MAX_NAMED)
        } else {
            String::new()
        }
    );
    true
}

/// How many leftover directories [`said_unowned`] names; how deep and how many directories
/// it looks at (an owner can make any number of them).
const MAX_NAMED: usize = 8;
const MAX_DEPTH: usize = 8;
const MAX_SEEN: usize = 256;

/// The directories below `dir` (down to [`MAX_DEPTH`], `budget` of them looked at at
/// most) whose `cgroup.procs` lists a process.
fn leftovers(dir: &Path, depth: usize, budget: &mut usize, found: &mut Vec<PathBuf>) {
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        *budget -= 1;
        let sub = entry.path();
        let holds = std::fs::read_to_string(sub.join("cgroup.procs"))
            .is_ok_and(|procs| !procs.trim().is_empty());
        if holds {
            found.push(sub.clone());
        }
        leftovers(&sub, depth + 1, budget, found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(job: u32, cpus: u32, job_ns: u64, owner: &Path, owner_ns: u64) -> OwnerSample<'_> {
        OwnerSample {
            job,
            cpus,
            job_ns,
            owner: (owner, owner_ns),
        }
    }

    /// A job whose processes left its directory for a leftover of the owner's ended job:
    /// its owner's directory still counts them, and the owner's jobs pay for them.
    #[test]
    fn time_moved_out_of_a_job_is_given_back_to_its_owners_jobs() {
        let (u, v) = (Path::new("/cg/uid_1000"), Path::new("/cg/uid_1001"));
        let mut time = OwnerTime::default();
        let first = [sample(1, 2, 100, u, 500), sample(2, 1, 10, v, 10)];
        assert_eq!(
            time.credit(&first, gone).jobs,
            HashMap::from([(1, 0), (2, 0)])
        );
        // job 1 grew 50 ns, its owner 950: 900 ns ran elsewhere under uid_1000
        let second = [sample(1, 2, 150, u, 1_450), sample(2, 1, 20, v, 20)];
        assert_eq!(
            time.credit(&second, gone).jobs,
            HashMap::from([(1, 900), (2, 0)])
        );
        // a second job of the owner arrives with 30 ns: the next 300 ns unexplained are
        // split by CPUs, 2 to 1, cumulatively
        let third = [
            sample(1, 2, 150, u, 1_780),
            sample(3, 1, 30, u, 1_780),
            sample(2, 1, 30, v, 30),
        ];
        assert_eq!(
            time.credit(&third, gone).jobs,
            HashMap::from([(1, 900 + 200), (3, 100), (2, 0)])
        );
    }

    #[test]
    fn an_owner_counter_that_goes_back_or_explains_everything_gives_nothing() {
        let u = Path::new("/cg/uid_1000");
        let mut time = OwnerTime::default();
        time.credit(&[sample(1, 1, 100, u, 1_000)], gone);
        // the owner's directory made anew: a new base, no credit
        assert_eq!(
            time.credit(&[sample(1, 1, 200, u, 50)], gone).jobs,
            HashMap::from([(1, 0)])
        );
        // all its growth is the job's
        assert_eq!(
            time.credit(&[sample(1, 1, 300, u, 150)], gone).jobs,
            HashMap::from([(1, 0)])
        );
        // the owner gone from the sample, their directory removed, is forgotten: back, it
        // starts from a new base
        assert_eq!(time.credit(&[], gone), Credit::default());
        assert_eq!(
            time.credit(&[sample(1, 1, 300, u, 9_000)], gone).jobs,
            HashMap::from([(1, 0)])
        );
    }

    /// An owner's directory that cannot be read: removed by Slurm.
    fn gone(_: &Path) -> Option<u64> {
        None
    }

    /// Issue 53: the owner's last job ends while a process of theirs burns on in a leftover
    /// directory: the owner is not forgotten while their directory stays, and what it uses
    /// is no job's (the neighbour's job 2 gets nothing of it). Back with a job, the owner's
    /// directory's use beyond it is the new job's again; the directory removed, the owner
    /// is forgotten.
    #[test]
    fn an_owner_with_no_job_left_burns_cpu_time_of_no_job() {
        let (u, v) = (Path::new("/cg/uid_1000"), Path::new("/cg/uid_1001"));
        let mut time = OwnerTime::default();
        let neighbour = |ns| sample(2, 1, ns, v, ns);
        time.credit(&[sample(1, 1, 100, u, 500), neighbour(10)], gone);
        // job 1 ends; its owner's directory grew 700 ns since (its last moments, then the
        // burner), 1 000 ns by the next sample
        let mut owner_ns = 1_200;
        let mut read = |dir: &Path| (dir == u).then_some(owner_ns);
        let credit = time.credit(&[neighbour(20)], &mut read);
        assert_eq!(credit.jobs, HashMap::from([(2, 0)]));
        assert_eq!(credit.unowned_ns, 700);
        owner_ns = 2_200;
        let mut read = |dir: &Path| (dir == u).then_some(owner_ns);
        let credit = time.credit(&[neighbour(30)], &mut read);
        assert_eq!(
            (credit.jobs, credit.unowned_ns),
            (HashMap::from([(2, 0)]), 1_000)
        );
        // the owner back with job 3, which used 100 ns: the other 400 ns are its
        let credit = time.credit(&[sample(3, 1, 100, u, 2_700), neighbour(40)], gone);
        assert_eq!(
            (credit.jobs, credit.unowned_ns),
            (HashMap::from([(3, 400), (2, 0)]), 0)
        );
        // job 3 ends, the directory goes: the owner is forgotten, nobody used anything
        assert_eq!(time.credit(&[neighbour(50)], gone).unowned_ns, 0);
        assert_eq!(time.owners.len(), 1);
    }

    /// What is logged names the directories below the owner's that hold processes.
    #[test]
    fn the_leftover_directories_holding_processes_are_found() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let owner = tmp.path().join("uid_1000");
        let hide = owner.join("job_5/step_batch/hide");
        for (dir, procs) in [
            (owner.join("job_5"), ""),
            (owner.join("job_5/step_batch"), ""),
            (hide.clone(), "4242\n"),
        ] {
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(dir.join("cgroup.procs"), procs).expect("procs");
        }
        let (mut found, mut budget) = (Vec::new(), MAX_SEEN);
        leftovers(&owner, 0, &mut budget, &mut found);
        assert_eq!(found, vec![hide]);
        assert!(said_unowned(&owner, 1_000));
        // the budget bounds the walk
        let mut found = Vec::new();
        leftovers(&owner, 0, &mut 2, &mut found);
        assert!(found.is_empty());
        assert!(!said_unowned(&tmp.path().join("uid_1001"), 1_000));
    }

    #[test]
    fn shares_add_up_to_the_whole() {
        let u = Path::new("/u");
        let jobs = [
            sample(1, 3, 0, u, 0),
            sample(2, 3, 0, u, 0),
            sample(3, 3, 0, u, 0),
        ];
        let refs: Vec<&OwnerSample> = jobs.iter().collect();
        assert_eq!(by_cpus(100, &refs), vec![34, 33, 33]);
        let none = [sample(1, 0, 0, u, 0), sample(2, 0, 0, u, 0)];
        let refs: Vec<&OwnerSample> = none.iter().collect();
        assert_eq!(by_cpus(7, &refs), vec![4, 3]);
    }
}
