//! The accounts the ledger keeps: the node's, each job's and each step's, each with the power
//! published beside its figure. Apart from the ledger's sampling so that what one account
//! holds, and how it is charged one interval, reads in one place.

use std::collections::{BTreeMap, BTreeSet};

use super::{Breakdown, ENDED_STEPS_KEPT, KEEP_ENDED_STEP, ObservedJob, number, unix};
use crate::accounting::PowerWindow;
use crate::attribution::StepId;

/// One job's or one step's account, or the node's.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Account {
    /// Its energy, in joules.
    #[serde(deserialize_with = "number::finite")]
    pub joules: f64,
    /// Its share of the node's power over the last interval.
    #[serde(deserialize_with = "number::finite")]
    pub watts: f64,
    /// Unix time its counting began.
    #[serde(deserialize_with = "number::finite")]
    pub since: f64,
}

impl Account {
    /// An account with nothing counted yet, begun at `since`.
    pub(super) fn since(since: f64) -> Self {
        Self {
            since,
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct Job {
    pub(super) account: Account,
    pub(super) steps: BTreeMap<StepId, Step>,
    pub(super) usage_ns: Option<u64>,
    pub(super) last_seen: f64,
    pub(super) rate: Rate,
    /// The devices it has held (by position): a device it holds anew is charged what
    /// nobody got of it since the job began.
    pub(super) held: BTreeSet<u32>,
    pub(super) breakdown: Breakdown,
}

impl Job {
    /// Forgets its steps that ended ([`KEEP_ENDED_STEP`]) more than that long ago, or
    /// beyond the [`ENDED_STEPS_KEPT`] that ended last; a step seen at `now` is running.
    pub(super) fn forget_ended_steps(&mut self, now: f64) {
        let keep = KEEP_ENDED_STEP.as_secs_f64();
        self.steps.retain(|_, s| now - s.last_seen <= keep);
        let mut ended: Vec<(f64, StepId)> = self
            .steps
            .iter()
            .filter(|(_, s)| s.last_seen < now)
            .map(|(&id, s)| (s.last_seen, id))
            .collect();
        if let Some(excess) = ended.len().checked_sub(ENDED_STEPS_KEPT).filter(|&e| e > 0) {
            ended.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for (_, id) in &ended[..excess] {
                self.steps.remove(id);
            }
        }
    }

    /// Its account, begun at its first step's start.
    pub(super) fn new(o: &ObservedJob, now: f64) -> Self {
        Self {
            account: Account::since(o.started().unwrap_or(now).min(now)),
            ..Self::default()
        }
    }

    /// Charges its step `id` (of `o`, as observed) `joules` of the interval `(began,
    /// now)`; a step first seen counts from its start. Returns the step, for its parts.
    pub(super) fn charge_step(
        &mut self,
        o: &ObservedJob,
        id: StepId,
        joules: f64,
        (began, now): (f64, f64),
        settled: bool,
    ) -> &mut Step {
        let started = o.steps.iter().find(|s| s.id == id).and_then(|s| s.started);
        let step = self.steps.entry(id).or_insert_with(|| Step {
            account: Account::since(started.map_or(now, unix).min(now)),
            ..Step::default()
        });
        step.rate
            .charge(&mut step.account, began, now, joules, settled);
        step
    }
}

/// One job of a ledger, as its readers see it.
#[derive(Debug, Clone, Copy)]
pub struct JobView<'a> {
    pub id: u32,
    pub(super) job: &'a Job,
}

impl JobView<'_> {
    pub fn account(&self) -> Account {
        self.job.account
    }

    /// Unix time of the last sample that saw it on the node.
    pub fn last_seen(&self) -> f64 {
        self.job.last_seen
    }

    /// Its steps' accounts, in step order.
    pub fn steps(&self) -> impl Iterator<Item = (StepId, Account)> + '_ {
        self.job.steps.iter().map(|(&id, s)| (id, s.account))
    }

    /// Its energy by part and what it held idle (`ledger::parts`).
    pub fn breakdown(&self) -> &Breakdown {
        &self.job.breakdown
    }

    /// Its step `id`'s energy by part and what it held idle.
    pub fn step_breakdown(&self, id: StepId) -> Option<&Breakdown> {
        self.job.steps.get(&id).map(|s| &s.breakdown)
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct Step {
    pub(super) account: Account,
    pub(super) usage_ns: Option<u64>,
    pub(super) rate: Rate,
    /// Unix time of the last sample that saw it running.
    pub(super) last_seen: f64,
    pub(super) breakdown: Breakdown,
}

/// The power of an account, published with its figure: over a window of at least a second
/// (a step's edge asks for a sample milliseconds after the one before, and the energy of so
/// short an interval is mostly the counters' granularity), closed at settled samples only
/// ([`PowerWindow`]). Not kept in the file: a restarted slurmd starts a new window.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Rate(PowerWindow);

impl Rate {
    /// Charges `account` the `joules` of an interval from `began` to `now` (`settled` or
    /// not), and gives it the power over the last closed window (over the first window so
    /// far, until one closes; unknown, 0, until a window spans a second).
    pub(super) fn charge(
        &mut self,
        account: &mut Account,
        began: f64,
        now: f64,
        joules: f64,
        settled: bool,
    ) {
        // a new account's figure began with nothing at its start, which its first window
        // does too: one found after its start is charged here the energy since then, not
        // over this interval alone (a power far above the node's), and one that began
        // within the interval only the part since
        let from = if account.joules == 0.0 {
            account.since.min(now)
        } else {
            began
        };
        self.0.begin(from, account.joules);
        account.joules += joules;
        account.watts = self
            .0
            .update(now, account.joules, settled)
            .or_else(|| self.0.so_far(now, account.joules))
            .unwrap_or(0.0);
    }
}
