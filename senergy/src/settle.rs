//! When `senergy job --wait` stops asking accounting again: when every job's figures are
//! final ([`crate::report::settled`]), and also when no figure will ever come, so that
//! waiting could change nothing. MailProg's summary ([`crate::mail`]) waits this way, in
//! one of slurmctld's 64 mail threads: a job that never settles held that thread for the
//! whole wait (60 s), and a user's 10 000 jobs cancelled while pending, each with an END
//! mail, held every mail thread for hours. Pure: no Slurm.

use crate::check::FAMILY;
use crate::record::JobRow;
use crate::report;
use slurm_sys::job_states::{JOB_PENDING, JOB_RUNNING, JOB_SUSPENDED};

/// What accounting's row of a job says of its figures to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settling {
    /// Ended, every step ended, its energy what slurmctld adds up from them: final.
    Settled,
    /// Ended on no node (cancelled while pending, or before its start): no node measured
    /// it, no figure will come.
    NeverRan,
    /// Ended where no energy plugin of ours measures (slurm.conf's AcctGatherEnergyType
    /// names none): accounting's figure, if any, is not one this wait is for.
    Unmeasured,
    /// Not yet: accounting does not hold its end, or not the energy its steps add up to.
    Pending,
}

/// Whether accounting holds the job's end: slurmctld has sent slurmdbd its end time and
/// a state past running.
fn ended(job: &JobRow) -> bool {
    job.end > 0 && !matches!(job.state, JOB_PENDING | JOB_RUNNING | JOB_SUSPENDED)
}

/// Whether an ended job ran on no node: no start, no node allocated, or the node list
/// slurmdbd writes for none (`None assigned`, 22.05 to 26.05) or leaves empty.
fn on_no_node(job: &JobRow) -> bool {
    let nodes = job.nodes.trim();
    job.start <= 0 || job.alloc_nodes == 0 || nodes.is_empty() || nodes == "None assigned"
}

/// The job's row as `--wait` judges it; `measured`: slurm.conf names an energy plugin of
/// ours ([`measured_by_ours`]).
pub fn settling(job: &JobRow, measured: bool) -> Settling {
    if !ended(job) {
        Settling::Pending
    } else if on_no_node(job) {
        Settling::NeverRan
    } else if !measured {
        Settling::Unmeasured
    } else if report::settled(job) {
        Settling::Settled
    } else {
        Settling::Pending
    }
}

/// Whether asking again may change `rows`: accounting holds none of the jobs yet (slurmdbd
/// may not have the job's record when its END mail goes out), or one is still
/// [`Settling::Pending`].
pub fn worth_waiting(rows: &[JobRow], measured: bool) -> bool {
    rows.is_empty()
        || rows
            .iter()
            .any(|r| settling(r, measured) == Settling::Pending)
}

/// Whether AcctGatherEnergyType (slurm.conf's, comma-separated) names a plugin of ours.
pub fn measured_by_ours(energy_types: &str) -> bool {
    energy_types
        .split(',')
        .any(|t| t.trim().starts_with(FAMILY))
}

#[cfg(test)]
mod tests;
