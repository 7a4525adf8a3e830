//! What Slurm's accounting holds for a job and its steps, in safe types (filled by
//! [`crate::ffi`] from `slurmdb_job_rec_t` / `slurmdb_step_rec_t`).

/// Slurm's step ids for the special steps (`slurm.h`).
pub const BATCH_STEP: u32 = slurm_sys::SLURM_BATCH_SCRIPT;
pub const EXTERN_STEP: u32 = slurm_sys::SLURM_EXTERN_CONT;
pub const INTERACTIVE_STEP: u32 = slurm_sys::SLURM_INTERACTIVE_STEP;
pub const PENDING_STEP: u32 = slurm_sys::SLURM_PENDING_STEP;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRow {
    pub job_id: u32,
    /// `Some((array job id, task id))` for an element of a job array.
    pub array: Option<(u32, u32)>,
    /// `Some((het job id, offset))` for a component of a heterogeneous job: the leader is
    /// offset 0, its id the het job's.
    pub het: Option<(u32, u32)>,
    pub user: String,
    pub account: String,
    pub name: String,
    /// `job_states` base state (`state & JOB_STATE_BASE`).
    pub state: u32,
    /// Unix seconds; 0 when not (yet) started / ended.
    pub start: i64,
    pub end: i64,
    pub elapsed_s: u64,
    pub alloc_nodes: u32,
    pub nodes: String,
    /// `tres_alloc_str`: at the job's end slurmctld adds its energy (TRES 3) here, which
    /// is what sacct shows as the job's ConsumedEnergy.
    pub tres_alloc: String,
    /// `admin_comment`: where `senergy record` kept the job's figures before it kept them
    /// in the SystemComment ([`crate::kept`]): still read for those jobs.
    pub admin_comment: String,
    /// `system_comment`: where `senergy record` keeps the job's figures ([`crate::kept`]).
    pub system_comment: String,
    pub steps: Vec<StepRow>,
}

/// How far slurmctld's clock (accounting's times, whole seconds) and a node's may disagree
/// in [`JobRow::running_at`].
const CLOCK_SLACK_S: f64 = 2.0;

impl JobRow {
    /// Whether this run of its job id was running at unix time `t` (or is not known to
    /// have begun after it nor ended before it): a job id comes round again (MaxJobId) and
    /// a requeued job runs again under its id, and a run that ended before `t`, or began
    /// after it, is another job's. A run not yet started or ended in accounting (slurmdbd
    /// behind) is not ruled out.
    pub fn running_at(&self, t: f64) -> bool {
        let begun = self.start <= 0 || self.start as f64 <= t + CLOCK_SLACK_S;
        // an end in whole seconds is up to one early
        let not_ended = self.end <= 0 || self.end as f64 + 1.0 + CLOCK_SLACK_S >= t;
        begun && not_ended
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRow {
    pub step_id: u32,
    pub het_comp: Option<u32>,
    pub name: String,
    pub nodes: String,
    pub nnodes: u32,
    pub state: u32,
    pub start: i64,
    pub end: i64,
    pub elapsed_s: u64,
    /// `stats.consumed_energy` (sacct's ConsumedEnergy of the step).
    pub consumed_energy: u64,
    pub usage: StepUsage,
}

/// The step's TRES usage strings (`stats.tres_usage_*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepUsage {
    pub in_max: String,
    pub in_max_nodeid: String,
    pub in_min: String,
    pub in_min_nodeid: String,
    pub in_tot: String,
    pub out_max: String,
}

/// The name sacct gives a step (`123.0`, `123.batch`, ...) after the job id.
pub fn step_name(step_id: u32, het_comp: Option<u32>) -> String {
    let base = match step_id {
        BATCH_STEP => "batch".to_string(),
        EXTERN_STEP => "extern".to_string(),
        INTERACTIVE_STEP => "interactive".to_string(),
        PENDING_STEP => "pending".to_string(),
        id => id.to_string(),
    };
    match het_comp {
        Some(comp) => format!("{base}+{comp}"),
        None => base,
    }
}

/// The job's user as slurmdbd named it, else as this host names its uid, else the uid.
pub fn user_name(recorded: String, uid: u32) -> String {
    if !recorded.is_empty() {
        return recorded;
    }
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's row from `start` to `end` (0: not in accounting yet).
    fn run(start: i64, end: i64) -> JobRow {
        JobRow {
            job_id: 7,
            start,
            end,
            ..JobRow::default()
        }
    }

    /// A job id come round again: the run of a year before, or the run before a requeue
    /// (ended 5 s at least before the next began: AuthInfo's `cred_expire`), is not the run
    /// a node measured from `t`; the run itself is, ended or not, started in accounting or
    /// not yet.
    #[test]
    fn a_run_of_the_same_job_id_before_or_after_is_another_jobs() {
        let t = 1_800_000_000.0;
        let year = 365 * 86_400;
        let now = t as i64;
        assert!(!run(now - year, now - year + 60).running_at(t));
        assert!(!run(now - 100, now - 5).running_at(t));
        assert!(!run(now + 30, 0).running_at(t));
        assert!(run(now - 3, 0).running_at(t));
        assert!(run(now - 3, now + 60).running_at(t));
        assert!(run(0, 0).running_at(t));
        // a node's clock a second ahead of slurmctld's, an end rounded down
        assert!(run(now + 1, now + 1).running_at(t + 1.9));
    }
}
