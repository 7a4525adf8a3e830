//! A step's figure counted from what slurmd answers: sans-IO, as quinn-proto's
//! `Connection`. An answer and the call's time in, the figure and its power out; what the
//! step's process shows (when it started) handed in as a plain value. Its tests need no
//! file, no /proc and no slurmd.

use std::sync::{Mutex, PoisonError};

use crate::accounting::MAX_PARTS;
use crate::exchange::ask::Answer;
use crate::ledger::{LEDGER_PERIOD, MAX_GAP, RUN_SLACK};
use crate::source::{PartReading, stale_after};

/// The ledger is older than slurmd's samples ever leave it: slurmd is gone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stale {
    /// Its age, seconds.
    pub age: f64,
}

/// What a step counted of slurmd's ledgers: in node mode the node's energy since the step
/// began, in shared mode the step's share; brought up to the moment of the call at the
/// last power the ledger published, at most [`LEDGER_PERIOD`] ahead, unless energy
/// plugins are stacked.
#[derive(Debug)]
pub(super) struct Tally {
    /// Whether it counts its share (else the node's energy since it began): as the
    /// ledger's slurmd splits ([`Answer::shares`]), decided at its first read of each
    /// ledger; `configured` where the ledger does not say.
    shared: bool,
    /// What this slurmstepd's own acct_gather.conf says. After `scontrol reconfigure`
    /// slurmd splits by the new file while a step begun before read the old one.
    configured: bool,
    /// Whether it said that it follows slurmd's mode rather than its own configuration.
    said_mode: bool,
    /// Whether a figure is brought forward from the ledger's sample to the call.
    bring_forward: bool,
    /// When this process started (Unix time), once known: a step of its name in the
    /// ledger begun before it is a run before this one.
    started: Option<f64>,
    /// What the step counted in the ledger it reads now.
    counted: Option<Counted>,
    /// What it counted in ledgers before this one.
    carried_uj: u64,
    /// In node mode, the node's parts as the ledger last gave them, for the profile.
    parts: Vec<PartReading>,
}

/// A part's label as a reading carries it (`&'static`, as a source's own): each distinct
/// label is kept once for the process's life, and a ledger that names more than a few
/// dozen gets no more.
fn static_label(label: &str) -> Option<&'static str> {
    static LABELS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = labels.iter().find(|l| **l == label) {
        return Some(known);
    }
    if labels.len() >= 4 * MAX_PARTS {
        return None;
    }
    let kept: &'static str = Box::leak(label.to_owned().into_boxed_str());
    labels.push(kept);
    Some(kept)
}

#[derive(Debug, Clone, Copy)]
struct Counted {
    epoch: u64,
    /// The ledger's figure at the step's start: in node mode the node's energy when the
    /// step first read it, in shared mode 0 (a share starts with the step).
    base_j: f64,
    /// The highest figure the ledger itself published: the figure never falls below one
    /// published before. The extrapolation on top is not kept: when the power fell after
    /// the ledger's sample, keeping it would count the old power into the step's final
    /// figure.
    published_j: f64,
    /// The step's figure at its last read, its power, and the unix time the figure reaches
    /// (the ledger's sample, brought forward as far as it was: not the read's time where
    /// the ledger was older than a figure is brought forward, so the time after it is
    /// estimated when slurmd begins a new ledger, not lost).
    figure_uj: u64,
    watts: f64,
    counted_to: f64,
    /// When the ledger it last counted in was sampled.
    sampled_at: f64,
}

impl Tally {
    /// Counts the step's share if `shared`, else the node's energy since it began.
    pub(super) fn new(shared: bool) -> Self {
        Self {
            shared,
            configured: shared,
            said_mode: false,
            bring_forward: true,
            started: None,
            counted: None,
            carried_uj: 0,
            parts: Vec::new(),
        }
    }

    /// Energy plugins are stacked: figures are taken as the ledger gives them
    /// (`StepFigure::stacked`).
    pub(super) fn stacked(&mut self) {
        self.bring_forward = false;
    }

    /// Whether figures are brought forward to the call.
    pub(super) fn brings_forward(&self) -> bool {
        self.bring_forward
    }

    /// Whether it counts its share (else the node's energy since it began).
    pub(super) fn shared(&self) -> bool {
        self.shared
    }

    /// Whether it ever counted a figure.
    pub(super) fn counted(&self) -> bool {
        self.counted.is_some()
    }

    /// When the ledger it last counted in was sampled.
    pub(super) fn counted_at(&self) -> Option<f64> {
        self.counted.map(|c| c.sampled_at)
    }

    /// Whether it knows when its process started.
    pub(super) fn knows_start(&self) -> bool {
        self.started.is_some()
    }

    /// Its process started at `started` (Unix time), where known.
    pub(super) fn started(&mut self, started: Option<f64>) {
        self.started = started;
    }

    /// The node's parts as the ledger last gave them (node mode).
    pub(super) fn parts(&self) -> &[PartReading] {
        &self.parts
    }

    /// Whether a step of this name begun at `since` (Unix time) is this run of it, not an
    /// earlier run of a requeued job the ledger still holds.
    fn this_run(&self, since: f64) -> bool {
        self.started
            .is_none_or(|started| since >= started - RUN_SLACK)
    }

    /// Reads its figure as the ledger's slurmd splits, whatever this slurmstepd read in
    /// acct_gather.conf: after `scontrol reconfigure` slurmd splits by the new value while
    /// the steps begun before read the old one (and a slurmd that could not apply it, or
    /// one of another version, may split otherwise than the file says). A step that took
    /// the node's energy from a ledger of shares would charge its job the whole node.
    /// Returns whether the mode changed since the step's last read of the same ledger; said
    /// once when it differs from the step's own.
    fn follow_mode(&mut self, ledger: &Answer) -> bool {
        let shares = ledger.shares.unwrap_or(self.configured);
        let switched =
            shares != self.shared && self.counted.is_some_and(|c| c.epoch == ledger.epoch);
        self.shared = shares;
        if shares != self.configured && !self.said_mode {
            self.said_mode = true;
            let mode = |shares| if shares { "shared" } else { "node" };
            log::warn!(
                "{} as this slurmstepd read acct_gather.conf gives {}, but slurmd splits by {}: \
                 this step follows slurmd",
                crate::attribution::MODE_KEY,
                mode(self.configured),
                mode(shares)
            );
        }
        switched
    }

    pub(super) fn total_uj(&self) -> u64 {
        self.carried_uj + self.counted.map_or(0, |c| c.figure_uj)
    }

    /// Counts the step's figure in `ledger` at unix time `now`; returns its power, or how
    /// old the ledger is where slurmd no longer samples.
    pub(super) fn count(&mut self, ledger: &Answer, now: f64) -> Result<f64, Stale> {
        let switched = self.follow_mode(ledger);
        let age = (now - ledger.sampled_at).max(0.0);
        let ahead = if self.bring_forward {
            age.min(LEDGER_PERIOD.as_secs_f64())
        } else {
            0.0
        };
        let (joules, watts) = self.in_mode(ledger, self.shared);
        let epoch = ledger.epoch;
        if switched && let Some(mut c) = self.counted.take() {
            // its figure at the switch is its own account in the ledger, which slurmd kept
            // the old way to the moment it switched (never less than the figure it gave
            // before; the old way's figure to this ledger where the ledger has no account of
            // it yet); from there it counts the new way
            let reported_j = c.figure_uj as f64 / 1e6;
            let figure_j = match self.in_mode(ledger, true) {
                (own_j, own_watts) if own_j > 0.0 => reported_j.max(own_j + own_watts * ahead),
                _ => {
                    let (old_j, old_watts) = self.in_mode(ledger, !self.shared);
                    c.advance(old_j, old_watts, ahead);
                    c.figure_uj as f64 / 1e6
                }
            };
            self.counted = Some(Counted {
                epoch,
                base_j: joules + watts * ahead - figure_j,
                published_j: 0.0,
                figure_uj: (figure_j * 1e6) as u64,
                watts,
                counted_to: ledger.sampled_at + ahead,
                sampled_at: ledger.sampled_at,
            });
        }
        if age > stale_after(LEDGER_PERIOD).as_secs_f64() {
            // slurmd is gone: its last sample is the last figure known, taken as it is (not
            // brought forward) by a step that counted in this ledger, and kept
            if let Some(c) = self
                .counted
                .as_mut()
                .filter(|c| c.epoch == epoch && ledger.sampled_at > c.sampled_at)
            {
                c.published_j = c.published_j.max(joules);
                let figure_j = (c.published_j - c.base_j).max(0.0);
                c.figure_uj = (figure_j * 1e6) as u64;
                c.sampled_at = ledger.sampled_at;
                c.counted_to = ledger.sampled_at;
            }
            return Err(Stale { age });
        }
        match self.counted {
            Some(c) if c.epoch == epoch => {}
            previous => {
                if let Some(c) = previous {
                    let begun = epoch as f64 / 1e6;
                    let gap = (begun - c.counted_to).clamp(0.0, MAX_GAP.as_secs_f64());
                    let estimated_uj = (c.watts * gap * 1e6) as u64;
                    self.carried_uj += c.figure_uj + estimated_uj;
                    log::warn!(
                        "slurmd began a new energy ledger: this step keeps its {:.0} J, adds \
                         {:.0} J estimated for the {gap:.1} s between, and goes on from the \
                         new ledger's start",
                        c.figure_uj as f64 / 1e6,
                        estimated_uj as f64 / 1e6
                    );
                }
                // the node's energy at this first read (the step's first, at its plugin's
                // load, from a fresh sample: it rang for one)
                let base_j = match previous {
                    None if !self.shared => joules + watts * ahead,
                    _ => 0.0,
                };
                self.counted = Some(Counted {
                    epoch,
                    base_j,
                    published_j: 0.0,
                    figure_uj: 0,
                    watts,
                    counted_to: ledger.sampled_at + ahead,
                    sampled_at: ledger.sampled_at,
                });
            }
        }
        if let Some(c) = &mut self.counted {
            c.advance(joules, watts, ahead);
            c.counted_to = ledger.sampled_at + ahead;
            c.sampled_at = ledger.sampled_at;
        }
        Ok(watts)
    }

    /// The figure `ledger` gives and its power: the step's share if `shared`, else the
    /// node's energy (whose parts it then keeps for the profile).
    fn in_mode(&mut self, ledger: &Answer, shared: bool) -> (f64, f64) {
        if shared {
            // not yet named (the title is set after the plugin loads): no account
            return ledger
                .step
                .filter(|a| self.this_run(a.since))
                .map_or((0.0, 0.0), |a| (a.joules, a.watts));
        }
        self.parts = ledger
            .parts
            .iter()
            .filter_map(|p| {
                Some(PartReading {
                    label: static_label(&p.label)?,
                    energy_uj: Some((p.joules * 1e6) as u64),
                    watts: p.watts,
                })
            })
            .collect();
        (ledger.node.joules, ledger.node.watts)
    }
}

impl Counted {
    /// Counts the ledger's figure `joules` at power `watts`, brought forward `ahead`
    /// seconds (`base_j` is negative where the step switched mode with more counted than
    /// the new way's figure).
    fn advance(&mut self, joules: f64, watts: f64, ahead: f64) {
        self.published_j = self.published_j.max(joules);
        let figure_j = (self.published_j + watts * ahead - self.base_j).max(0.0);
        self.figure_uj = (figure_j * 1e6) as u64;
        self.watts = watts;
    }
}

#[cfg(test)]
mod tests;
