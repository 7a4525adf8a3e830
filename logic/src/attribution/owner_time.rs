//! CPU time a job's owner moved out of the job's cgroup, given back to the owner's jobs.
//!
//! Where Slurm gives a step's cgroup directories to the job's owner (cgroup v1 before
//! 23.02, or `RootOwnedCgroups=no`), the owner can make a child in one, which outlives the
//! step, and move their processes there: their CPU time then leaves the job's directory,
//! and a shared node's split would charge the neighbours for it. It never leaves the
//! owner's `uid_<U>` directory, which root owns ([`super::cgroup::StepCgroup::user_usage_ns`]).
//! So at each sample, what the owner's directory used beyond what the owner's present jobs
//! show is split among those jobs by the CPUs they hold: the owner pays for it, never a
//! neighbour. Use in the owner's directory while they have no job present is nobody's.

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
    jobs: HashMap<u32, u64>,
    /// The CPU time given to each job so far.
    credit: HashMap<u32, u64>,
}

/// The CPU time given back to each owner's jobs, per owner's directory.
#[derive(Debug, Default)]
pub(crate) struct OwnerTime {
    owners: HashMap<PathBuf, Last>,
}

impl OwnerTime {
    /// Each sampled job's CPU time given back so far (ns, to add to its directory's);
    /// owners with no job in `samples` are forgotten.
    pub(crate) fn credit(&mut self, samples: &[OwnerSample]) -> HashMap<u32, u64> {
        let mut by_owner: HashMap<&Path, Vec<&OwnerSample>> = HashMap::new();
        for s in samples {
            by_owner.entry(s.owner.0).or_default().push(s);
        }
        self.owners
            .retain(|dir, _| by_owner.contains_key(dir.as_path()));
        let mut credits = HashMap::new();
        for (dir, jobs) in by_owner {
            // the owner's counter is read after its jobs': the largest figure of the sample
            let owner_ns = jobs.iter().map(|s| s.owner.1).max().unwrap_or(0);
            let last = self.owners.entry(dir.to_path_buf()).or_default();
            let mut credit: HashMap<u32, u64> = jobs
                .iter()
                .map(|s| (s.job, last.credit.get(&s.job).copied().unwrap_or(0)))
                .collect();
            // a first sample, or a directory made anew (its counter went back), sets the base
            if !last.jobs.is_empty() && owner_ns >= last.owner_ns {
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
            };
            credits.extend(credit);
        }
        credits
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
        assert_eq!(time.credit(&first), HashMap::from([(1, 0), (2, 0)]));
        // job 1 grew 50 ns, its owner 950: 900 ns ran elsewhere under uid_1000
        let second = [sample(1, 2, 150, u, 1_450), sample(2, 1, 20, v, 20)];
        assert_eq!(time.credit(&second), HashMap::from([(1, 900), (2, 0)]));
        // a second job of the owner arrives with 30 ns: the next 300 ns unexplained are
        // split by CPUs, 2 to 1, cumulatively
        let third = [
            sample(1, 2, 150, u, 1_780),
            sample(3, 1, 30, u, 1_780),
            sample(2, 1, 30, v, 30),
        ];
        assert_eq!(
            time.credit(&third),
            HashMap::from([(1, 900 + 200), (3, 100), (2, 0)])
        );
    }

    #[test]
    fn an_owner_counter_that_goes_back_or_explains_everything_gives_nothing() {
        let u = Path::new("/cg/uid_1000");
        let mut time = OwnerTime::default();
        time.credit(&[sample(1, 1, 100, u, 1_000)]);
        // the owner's directory made anew: a new base, no credit
        assert_eq!(
            time.credit(&[sample(1, 1, 200, u, 50)]),
            HashMap::from([(1, 0)])
        );
        // all its growth is the job's
        assert_eq!(
            time.credit(&[sample(1, 1, 300, u, 150)]),
            HashMap::from([(1, 0)])
        );
        // the owner gone from the sample is forgotten: back, it starts from a new base
        time.credit(&[]);
        assert_eq!(
            time.credit(&[sample(1, 1, 300, u, 9_000)]),
            HashMap::from([(1, 0)])
        );
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
