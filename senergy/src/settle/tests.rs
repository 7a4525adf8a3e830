use super::*;
use crate::record::{BATCH_STEP, EXTERN_STEP, StepRow};
use slurm_sys::job_states::{JOB_CANCELLED, JOB_COMPLETE, JOB_NODE_FAIL};

const T: i64 = 1_735_689_660;

/// A job cancelled while pending, as slurmdbd returns it on 22.05: slurmctld sets its
/// start and end to the cancel's time, no node, no energy.
fn cancelled_pending() -> JobRow {
    JobRow {
        job_id: 7,
        state: JOB_CANCELLED,
        start: T,
        end: T,
        nodes: "None assigned".into(),
        tres_alloc: String::new(),
        ..JobRow::default()
    }
}

fn step(id: u32, joules: u64) -> StepRow {
    StepRow {
        step_id: id,
        nodes: "n1".into(),
        nnodes: 1,
        state: JOB_COMPLETE,
        start: T - 60,
        end: T,
        elapsed_s: 60,
        consumed_energy: joules,
        ..StepRow::default()
    }
}

/// A job that ran on n1: its batch and extern steps ended, accounting's energy `tres`.
fn ran(tres: &str) -> JobRow {
    JobRow {
        job_id: 8,
        state: JOB_COMPLETE,
        start: T - 60,
        end: T,
        elapsed_s: 60,
        alloc_nodes: 1,
        nodes: "n1".into(),
        tres_alloc: tres.into(),
        steps: vec![step(BATCH_STEP, 700), step(EXTERN_STEP, 734)],
        ..JobRow::default()
    }
}

/// A job that ended on no node is never worth a wait, whatever plugin measures: the
/// cancelled-while-pending job (slurmdbd's "None assigned"), one without a start, one with
/// an empty node list. Before this, `--wait` waited for its energy to the end (60 s).
#[test]
fn a_job_that_never_ran_is_not_waited_for() {
    let mut no_start = cancelled_pending();
    no_start.start = 0;
    no_start.nodes = String::new();
    let mut no_nodes = ran("1=1");
    no_nodes.alloc_nodes = 0;
    for (what, job) in [
        ("cancelled while pending", cancelled_pending()),
        ("no start", no_start),
        ("no node allocated", no_nodes),
    ] {
        for measured in [true, false] {
            assert_eq!(settling(&job, measured), Settling::NeverRan, "{what}");
            assert!(
                !worth_waiting(std::slice::from_ref(&job), measured),
                "{what}"
            );
        }
    }
    // a cancel that slurmdbd has not recorded yet: the row is still pending
    let mut queued = cancelled_pending();
    queued.state = JOB_PENDING;
    queued.end = 0;
    queued.start = 0;
    assert_eq!(settling(&queued, true), Settling::Pending);
    assert!(worth_waiting(&[queued], true));
}

/// With no plugin of ours in AcctGatherEnergyType, the job's end is all there is to wait
/// for: its energy (none, or Slurm's own plugins' figure) is not one ours will bring.
#[test]
fn a_job_no_plugin_of_ours_measured_is_not_waited_for_once_ended() {
    let no_energy = ran("1=1");
    assert_eq!(settling(&no_energy, false), Settling::Unmeasured);
    assert!(!worth_waiting(std::slice::from_ref(&no_energy), false));
    // ours measure: its energy is still to come
    assert_eq!(settling(&no_energy, true), Settling::Pending);
    assert!(worth_waiting(std::slice::from_ref(&no_energy), true));
    // not ended in accounting yet: its end is worth a wait either way
    let mut running = ran("1=1");
    running.state = JOB_RUNNING;
    running.end = 0;
    assert_eq!(settling(&running, false), Settling::Pending);
    for energy_types in [
        "acct_gather_energy/rust_rapl",
        "acct_gather_energy/ipmi, acct_gather_energy/rust_gpu",
    ] {
        assert!(measured_by_ours(energy_types), "{energy_types}");
    }
    for energy_types in [
        "",
        "acct_gather_energy/none",
        "acct_gather_energy/rapl",
        "acct_gather_energy/ipmi,acct_gather_energy/gpu",
    ] {
        assert!(!measured_by_ours(energy_types), "{energy_types}");
    }
}

/// A job that ran on our nodes is waited for until its energy is the steps' (as before),
/// and a row set is worth a wait while any row is; accounting with no row yet is too.
#[test]
fn a_measured_job_is_waited_for_until_settled() {
    let settled = ran("1=1,3=734");
    assert_eq!(settling(&settled, true), Settling::Settled);
    let lagging = ran("1=1,3=700");
    assert_eq!(settling(&lagging, true), Settling::Pending);
    let mut failed = ran("1=1");
    failed.state = JOB_NODE_FAIL;
    assert_eq!(settling(&failed, true), Settling::Pending);
    assert!(!worth_waiting(
        &[settled.clone(), cancelled_pending()],
        true
    ));
    assert!(worth_waiting(&[settled, lagging], true));
    assert!(worth_waiting(&[], true));
    assert!(worth_waiting(&[], false));
}
