//! slurmstepd's pipeline: its step's figure, asked of slurmd at each of Slurm's calls.
//!
//! No source and no sampler: slurmd's meter measures the node, and its keeper splits it
//! ([`crate::ledger`]). The step keeps its figure's accounting (the last good figure, its
//! power, its time) and its baseline, so that stacked plugins and task exits cannot reset
//! them.

mod figure;

use std::time::{Duration, Instant, SystemTime};

use crate::accounting::{Accounting, Baseline, EnergyRecord};
pub(super) use figure::StepFigure;

/// How long a step reports the last figure it could read (slurmd gone, its ledger
/// unreadable) before it reports none: the figure never goes back, and is said to be old
/// at each read (`StepFigure`); past this it is unavailable (`NO_VAL`), never a bogus one.
const KEPT_FOR: Duration = Duration::from_secs(90);

pub(super) struct StepPipeline {
    figure: StepFigure,
    accounting: Accounting,
    /// Energy since the step began: the figure is the step's own already (in shared mode
    /// it may hold a share counted before this process could first read it).
    baseline: Option<Baseline>,
    /// Energy plugins are stacked: Slurm sums each plugin's answers ([`stacked_step`]).
    stacked: bool,
}

impl StepPipeline {
    /// Takes the step's first figure now.
    pub(super) fn open(figure: StepFigure, stacked: bool) -> Self {
        log::info!("measuring {}", figure.describe());
        let mut pipeline = Self {
            figure,
            accounting: Accounting::new(SystemTime::now()),
            baseline: None,
            stacked,
        };
        pipeline.read();
        pipeline
    }

    /// Reads the step's figure now.
    fn read(&mut self) -> Accounting {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let reading = self.figure.read();
        self.accounting.record(&reading, now, wall);
        self.accounting
    }

    /// The figure now (`fresh`), or as of the last read, as a node record: what
    /// `--profile=energy` and `ENERGY_DATA_NODE_ENERGY` get in slurmstepd.
    pub(super) fn node_record(&mut self, fresh: bool) -> EnergyRecord {
        let accounting = if fresh { self.read() } else { self.accounting };
        accounting.node_record(Instant::now(), KEPT_FOR)
    }

    /// The node's parts as slurmd's ledger last gave them (node mode), for the profile.
    pub(super) fn part_records(&self) -> Vec<(&'static str, EnergyRecord)> {
        self.accounting.part_records(Instant::now(), KEPT_FOR)
    }

    /// The step's record (`ENERGY_DATA_NODE_ENERGY_UP`), as Slurm must get it.
    pub(super) fn step_record(&mut self) -> EnergyRecord {
        let accounting = self.read();
        let now = Instant::now();
        if self.baseline.is_none() {
            self.baseline = Baseline::from_zero(&accounting);
        }
        let record = match &mut self.baseline {
            Some(step) => step.record(&accounting, now, KEPT_FOR),
            None => accounting.node_record(now, KEPT_FOR),
        };
        stacked_step(self.stacked, record)
    }
}

/// A step's figure as slurmstepd's jobacct_gather must get it. With stacked plugins,
/// Slurm's `acct_gather_energy_g_get_sum` adds every plugin's figure to the caller's
/// struct without clearing it, and jobacct_gather passes the task's record, which holds
/// the previous poll's sum: the step's energy would grow by the whole figure at every
/// poll. Each stacked plugin therefore answers with its energy since its previous
/// answer, and Slurm's running sum is the step's energy (a single plugin's figure
/// replaces the record, so it stays the total).
fn stacked_step(stacked: bool, record: EnergyRecord) -> EnergyRecord {
    if !stacked {
        return record;
    }
    EnergyRecord {
        consumed_j: record.consumed_j.map(|_| record.base_consumed_j),
        ..record
    }
}
