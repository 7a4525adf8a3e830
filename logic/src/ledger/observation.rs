//! What the ledger is given at each sample: the node's meter, its parts and devices, and the
//! jobs and steps the cgroups show. Apart from the accounts it updates, so that whoever
//! feeds a ledger (slurmd's keeper, the tests) reads what it must bring in one place.

use std::time::{Instant, SystemTime};

use super::{number, unix};
use crate::attribution::StepId;
use crate::attribution::cgroup::JobCounters;
use crate::attribution::holders::ObservedDevice;
use crate::source::HardwareCount;

/// What the meter and the cgroups said at one sample.
#[derive(Debug, Clone)]
pub struct Observation {
    pub at: Instant,
    pub wall: SystemTime,
    /// The node's energy since the meter opened.
    pub node_uj: u64,
    /// No counter held a read undecided ([`crate::source::Reading::unsettled`]).
    pub settled: bool,
    /// The jobs on the node, with their counters (`None`: no cgroup found) and their steps.
    pub jobs: Vec<ObservedJob>,
    /// CPU time since the last observation (ns) that no job present used, of owners with
    /// no job left on the node ([`crate::attribution::owner_time`]): in the shared split,
    /// its part of the dynamic energy is charged to no job.
    pub unowned_cpu_ns: u64,
    /// The parts of the node its source measures beside it, as they are now.
    pub parts: Vec<Part>,
    /// The devices Slurm allocates (GPUs), in [`Split::Devices`](super::Split::Devices).
    pub devices: Vec<ObservedDevice>,
    /// The hardware's counts behind `node_uj` ([`crate::source::Reading::counts`]).
    pub counts: Vec<HardwareCount>,
    /// The node's power as its meter measured it up to this sample, where it has (for a
    /// slurmd started again, its power since it opened: what follows the time it was
    /// away, which tells how often a counter wrapped meanwhile).
    pub watts: Option<f64>,
}

/// A part of the node (pm_counters' cpu, memory, accelN): its energy since slurmd's meter
/// opened and its power, for a step's `--profile=energy` samples.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Part {
    pub label: String,
    #[serde(deserialize_with = "number::finite")]
    pub joules: f64,
    #[serde(deserialize_with = "number::optional_finite")]
    pub watts: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct ObservedJob {
    pub job: u32,
    pub counters: Option<JobCounters>,
    pub steps: Vec<ObservedStep>,
}

#[derive(Debug, Clone)]
pub struct ObservedStep {
    pub id: StepId,
    /// Its CPU time so far, `None` when unknown.
    pub usage_ns: Option<u64>,
    /// When its slurmstepd started, when known: it is charged from then.
    pub started: Option<SystemTime>,
    /// The devices it holds, `(position, shares)` ([`Split::Devices`](super::Split::Devices)).
    pub holds: Vec<(u32, f64)>,
}

impl ObservedJob {
    /// When the job arrived: its first step's start.
    pub(super) fn started(&self) -> Option<f64> {
        self.steps
            .iter()
            .filter_map(|s| s.started.map(unix))
            .min_by(f64::total_cmp)
    }
}
