//! How one sample interval's node energy is split among the jobs present at both ends.
//!
//! Static part `S = min(dE, P_static * dt)`, dynamic part `D = dE - S`. A job pays the static
//! part for what it holds, `h_j` (its share of the jobs' CPUs, averaged with its share of
//! their memory limits when every job has one), and the dynamic part for what it used, its
//! share of the jobs' CPU time in the interval (by `h_j` when nobody used any CPU). The
//! shares of each part sum to 1, so the jobs together get exactly `dE`.
//!
//! CPU time that no job present used but Slurm's tree still counts (an owner's processes
//! left in a leftover directory of their ended job, [`super::owner_time`]) is a user of the
//! dynamic part like a job, whose part is charged to no job, as a GPU's use by no job is.
//!
//! A job that arrives within an interval is charged from its arrival, not from the next
//! interval ([`split_interval`]): the interval is cut at each arrival, the energy before the
//! first arrival is taken at the node's power over the interval before (nothing the new job
//! does has changed it yet), and each piece is split among the jobs present in it.

/// What one job held and used over one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct JobUse {
    pub cpus: u32,
    /// Its memory limit in bytes; `None` when unlimited.
    pub memory: Option<u64>,
    /// CPU seconds used in the interval (since its arrival for a job that arrived in it).
    pub cpu_secs: f64,
    /// Seconds into the interval at which the job arrived; 0 or less when it was there from
    /// the start (less: it arrived before, and is seen only now).
    pub arrived: f64,
}

/// One sample interval of the node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Interval {
    pub joules: f64,
    pub secs: f64,
    pub static_watts: f64,
    /// The node's power over the interval before, when known.
    pub prior_watts: Option<f64>,
}

/// Each job's joules of the interval, and the part of the CPU time no job used
/// (`unowned_cpu_secs`, [`split_node`]): the interval is cut at the jobs' arrivals and each
/// piece split by [`split_node`] among the jobs present in it; a piece with no job in it is
/// nobody's. A job's CPU time, and the unowned, is spread evenly over its part of the
/// interval.
pub(crate) fn split_interval(
    interval: &Interval,
    jobs: &[JobUse],
    unowned_cpu_secs: f64,
) -> (Vec<f64>, f64) {
    split_pieces(interval, jobs, unowned_cpu_secs, split_node)
}

/// Each job's part of the interval's static energy, as [`split_interval`] charges it: cut at
/// the same arrivals, each piece's static part (`min(dE, P_static * dt)`) by what the jobs
/// present in it hold. What a job was charged for holding, used or not (the ledger's
/// idle-held CPUs).
pub(crate) fn static_shares(interval: &Interval, jobs: &[JobUse]) -> Vec<f64> {
    split_pieces(
        interval,
        jobs,
        0.0,
        |joules, secs, static_watts, jobs, _| {
            let static_j = static_part(joules, secs, static_watts);
            (holdings(jobs).iter().map(|h| h * static_j).collect(), 0.0)
        },
    )
    .0
}

/// The interval cut at the jobs' arrivals, each piece given by `split` (its energy, length
/// and static power, the jobs present in it, and the CPU time no job used in it) to the
/// jobs present in it and to no job.
fn split_pieces(
    interval: &Interval,
    jobs: &[JobUse],
    unowned_cpu_secs: f64,
    split: impl Fn(f64, f64, f64, &[JobUse], f64) -> (Vec<f64>, f64),
) -> (Vec<f64>, f64) {
    let secs = interval.secs;
    let mut shares = vec![0.0; jobs.len()];
    let mut unowned = 0.0;
    if secs <= 0.0 {
        return (shares, unowned);
    }
    if jobs.is_empty() {
        let (_, nobody) = split(
            interval.joules,
            secs,
            interval.static_watts,
            &[],
            unowned_cpu_secs,
        );
        return (shares, nobody);
    }
    let arrived = |j: &JobUse| j.arrived.clamp(0.0, secs);
    let mut bounds: Vec<f64> = jobs.iter().map(arrived).filter(|&a| a > 0.0).collect();
    bounds.extend([0.0, secs]);
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let lengths: Vec<f64> = bounds.windows(2).map(|w| w[1] - w[0]).collect();
    // before the first arrival the node ran as before; the rest is spread over time
    let head = match (interval.prior_watts, lengths.len()) {
        (Some(watts), 2..) => (watts.max(0.0) * lengths[0]).min(interval.joules),
        _ => interval.joules * lengths[0] / secs,
    };
    let rest_secs = secs - lengths[0];
    let energies = std::iter::once(head).chain(lengths[1..].iter().map(|len| {
        if rest_secs > 0.0 {
            (interval.joules - head) * len / rest_secs
        } else {
            0.0
        }
    }));
    for ((start, len), energy) in bounds.iter().zip(&lengths).zip(energies) {
        let present: Vec<usize> = (0..jobs.len())
            .filter(|&i| arrived(&jobs[i]) <= *start)
            .collect();
        let uses: Vec<JobUse> = present
            .iter()
            .map(|&i| {
                let span = secs - arrived(&jobs[i]);
                JobUse {
                    cpu_secs: if span > 0.0 {
                        jobs[i].cpu_secs * len / span
                    } else {
                        0.0
                    },
                    ..jobs[i]
                }
            })
            .collect();
        let (parts, nobody) = split(
            energy,
            *len,
            interval.static_watts,
            &uses,
            unowned_cpu_secs * len / secs,
        );
        for (&i, share) in present.iter().zip(parts) {
            shares[i] += share;
        }
        unowned += nobody;
    }
    (shares, unowned)
}

/// One part of a step in its job's share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepUse {
    /// The extern step is the job's container: it gets the job's whole share.
    pub is_extern: bool,
    pub cpu_secs: f64,
}

/// Each job's joules of `joules` spent over `secs` at a static power of `static_watts`, and
/// the part of no job: the dynamic part is split by CPU time among the jobs and the CPU
/// time no job used (`unowned_cpu_secs`), whose part is charged to no job; the static part
/// is the jobs' only. With no job, the dynamic part is no job's when any was unowned (the
/// static part waits for a job found late).
pub(crate) fn split_node(
    joules: f64,
    secs: f64,
    static_watts: f64,
    jobs: &[JobUse],
    unowned_cpu_secs: f64,
) -> (Vec<f64>, f64) {
    let unowned = unowned_cpu_secs.max(0.0);
    if jobs.is_empty() {
        let dynamic_j = joules - static_part(joules, secs, static_watts);
        return (Vec::new(), if unowned > 0.0 { dynamic_j } else { 0.0 });
    }
    let mut used: Vec<f64> = jobs.iter().map(|j| j.cpu_secs).collect();
    used.push(unowned);
    let mut held = holdings(jobs);
    held.push(0.0);
    let mut parts = split_static_dynamic(joules, secs, static_watts, &held, &used);
    let nobody = parts.pop().unwrap_or(0.0);
    (parts, nobody)
}

/// The one rule of every split: the static part by what each holds (`held`, summing to
/// 1, or all 0 where nobody holds anything: then it is nobody's), the dynamic part by what
/// each used (by `held` when nobody used anything). A user that holds nothing pays its use
/// and nothing more.
fn split_static_dynamic(
    joules: f64,
    secs: f64,
    static_watts: f64,
    held: &[f64],
    used: &[f64],
) -> Vec<f64> {
    let static_j = static_part(joules, secs, static_watts);
    let dynamic_j = joules - static_j;
    let used: Vec<f64> = used.iter().map(|u| u.max(0.0)).collect();
    let used = normalized(&used).unwrap_or_else(|| held.to_vec());
    held.iter()
        .zip(&used)
        .map(|(h, u)| h * static_j + u * dynamic_j)
        .collect()
}

/// The static part of `joules` spent over `secs`: what `static_watts` explains of it.
fn static_part(joules: f64, secs: f64, static_watts: f64) -> f64 {
    joules.min(static_watts.max(0.0) * secs.max(0.0)).max(0.0)
}

/// What one user of a shared device (a GPU) holds of it and used of it over one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DeviceUse {
    /// The shares it holds of the device (shards, an MPS percentage; 1 for the whole);
    /// `None`: it holds none and used it all the same (a job Slurm did not give it to,
    /// where devices are not constrained, or processes of no job).
    pub shares: Option<f64>,
    /// Its processes' use of the device in the interval, in the vendor's unit.
    pub busy: f64,
}

/// Each user's joules of a device's `joules` over `secs` at its static power
/// `static_watts`: the static part by the shares held among its holders, the rest by the
/// use of all its users, holders or not (by shares when the vendor reports no use). A
/// holder alone gets it all; a holder never pays for another's use. Where nobody holds
/// the device, what no use explains is nobody's: the parts then sum to less.
pub(crate) fn split_device(
    joules: f64,
    secs: f64,
    static_watts: f64,
    users: &[DeviceUse],
) -> Vec<f64> {
    let holders = users.iter().filter(|u| u.shares.is_some()).count();
    let shares: Vec<f64> = users
        .iter()
        .map(|u| u.shares.map_or(0.0, |s| s.max(0.0)))
        .collect();
    let held = normalized(&shares).unwrap_or_else(|| {
        users
            .iter()
            .map(|u| match u.shares {
                Some(_) => 1.0 / holders as f64,
                None => 0.0,
            })
            .collect()
    });
    let used: Vec<f64> = users.iter().map(|u| u.busy).collect();
    split_static_dynamic(joules, secs, static_watts, &held, &used)
}

/// Each job's share of what the jobs hold, summing to 1.
fn holdings(jobs: &[JobUse]) -> Vec<f64> {
    let equal = vec![1.0 / jobs.len() as f64; jobs.len()];
    let cpus: Vec<f64> = jobs.iter().map(|j| f64::from(j.cpus)).collect();
    let cpus = normalized(&cpus).unwrap_or(equal);
    let memory: Option<Vec<f64>> = jobs.iter().map(|j| j.memory.map(|m| m as f64)).collect();
    match memory.as_deref().and_then(normalized) {
        Some(memory) => cpus
            .iter()
            .zip(memory)
            .map(|(c, m)| 0.5 * c + 0.5 * m)
            .collect(),
        None => cpus,
    }
}

/// The values as fractions of their sum; `None` when the sum is zero.
fn normalized(values: &[f64]) -> Option<Vec<f64>> {
    let total: f64 = values.iter().sum();
    (total > 0.0).then(|| values.iter().map(|v| v / total).collect())
}

/// Each step's joules of its job's `joules`: the extern step gets them all; the others
/// (batch, srun steps, which run inside it) split them by their CPU time, equally when none
/// used any, so that they too add up to the job's share.
pub(crate) fn split_job(joules: f64, steps: &[StepUse]) -> Vec<f64> {
    let inner: Vec<f64> = steps
        .iter()
        .map(|s| {
            if s.is_extern {
                0.0
            } else {
                s.cpu_secs.max(0.0)
            }
        })
        .collect();
    let count = steps.iter().filter(|s| !s.is_extern).count();
    let shares = normalized(&inner).unwrap_or_else(|| {
        steps
            .iter()
            .map(|s| if s.is_extern { 0.0 } else { 1.0 / count as f64 })
            .collect()
    });
    steps
        .iter()
        .zip(shares)
        .map(|(s, share)| if s.is_extern { joules } else { share * joules })
        .collect()
}

#[cfg(test)]
mod tests;
