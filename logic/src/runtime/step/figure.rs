//! slurmstepd's figure of its step, from what slurmd's ledger says of it: the step's
//! pipeline end. A shell over two sans-IO parts: it reads what the step's process shows
//! (/proc, the spool) as [`life`] asks, lets [`life`] say which figure to ask for, fetches
//! it through the exchange's client ([`crate::exchange::Client`]), and has [`tally`] count
//! the answer.

mod life;
mod tally;

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use crate::attribution::procs::Procs;
use crate::attribution::{StepId, StepKey, own_step, present_steps};
use crate::exchange::{Client, Fetched};
use crate::ledger::{LEDGER_PERIOD, unix};
use crate::source::Reading;
use life::{Life, Seen};
use tally::{Stale, Tally};

/// slurmstepd's side: its step's figure from slurmd's ledger, asked of slurmd at each of
/// Slurm's calls (no source, no sampler: slurmd's meter measured it).
/// In node mode the node's energy since the step's first reading (when its slurmstepd
/// opened the plugin); in shared mode the step's share. Either is brought up to the moment
/// of the call at the last power the ledger published, at most [`LEDGER_PERIOD`] ahead,
/// unless energy plugins are stacked ([`StepFigure::stacked`]).
///
/// When the ledger cannot be read, is stale (slurmd gone) or was begun anew (slurmd lost
/// it), the step keeps the figure it had, says so once, and goes on from the new ledger's
/// start with the time between estimated at its last power: never a bogus figure.
pub(crate) struct StepFigure {
    /// slurmd, asked at each read.
    client: Client,
    /// This process: its title names its step, its tasks' end is the step's last edge.
    procs: Procs,
    pid: u32,
    step: Option<StepKey>,
    /// Which read of its life a call is.
    life: Life,
    /// What it counted of slurmd's answers.
    tally: Tally,
    /// The trouble with the ledger now, logged when it began.
    trouble: Option<String>,
}

/// Whether a read comes from one of Slurm's periodic polls, its threads `acctg` (a step's
/// JobAcctGatherFrequency) and `acctg_energy`/`acctg_prof` (profiling), named so in every
/// release: never a step's last figure, which is taken as its tasks are removed, from its
/// main thread. A step without tasks at such a poll is not at an edge: 26.05's extern step
/// never has any, and would otherwise ask slurmd for a sample at each of its polls.
fn periodic_poll(thread: &str) -> bool {
    thread.starts_with("acctg")
}

fn unix_now() -> f64 {
    unix(SystemTime::now())
}

impl StepFigure {
    /// `ledger`: the node's ledger file; `procs` shows this process, `pid`; `shared`: the
    /// step's share, else the node's energy since the step began.
    pub(crate) fn from_path(ledger: &Path, procs: &Procs, pid: u32, shared: bool) -> Self {
        Self {
            client: Client::new(ledger),
            procs: procs.clone(),
            pid,
            step: None,
            life: Life::default(),
            tally: Tally::new(shared),
            trouble: None,
        }
    }

    /// Energy plugins are stacked: Slurm adds up what each answers since its answer before,
    /// so a figure brought forward at a power that then fell would stay counted. The
    /// ledger's figure is taken as it is: at Slurm's periodic polls at most a sample period
    /// old; at a step's edges and other reads (sstat's) from a sample taken for it.
    pub(crate) fn stacked(mut self) -> Self {
        self.tally.stacked();
        self
    }

    fn step(&mut self) -> Option<StepKey> {
        if self.step.is_none() {
            let text = fs::read(self.procs.cmdline_path(self.pid)).ok()?;
            self.step = own_step(&String::from_utf8_lossy(&text).replace('\0', " "));
        }
        self.step
    }

    /// For an extern step, whether another step of its job is present (a step is present
    /// while its slurmstepd's socket is in the spool dir, which only root writes); `None`
    /// for any other step.
    fn extern_siblings(&mut self) -> Option<bool> {
        let StepKey {
            job,
            step: StepId::EXTERN,
        } = self.step()?
        else {
            return None;
        };
        let spool = self.client.ledger().parent()?;
        Some(
            present_steps(spool)
                .keys()
                .any(|k| k.job == job && k.step != StepId::EXTERN),
        )
    }

    /// What the step's process shows at this call, as far as [`Life`] needs it.
    fn seen(&mut self, called: f64) -> Seen {
        let periodic = self.tally.counted()
            && self
                .procs
                .calling_thread()
                .is_some_and(|t| periodic_poll(&t));
        let tasks =
            !self.life.looks_for_tasks(periodic) || !self.procs.children(self.pid).is_empty();
        let siblings = if self.life.looks_for_siblings(tasks) {
            self.extern_siblings()
        } else {
            None
        };
        Seen {
            periodic,
            tasks,
            siblings,
            // only where the job's other steps are gone may this be the extern step's last
            main_thread: siblings == Some(false) && self.procs.calling_tid() == Some(self.pid),
            late: self.tally.counted()
                && self
                    .client
                    .late(self.tally.counted_at(), called, LEDGER_PERIOD),
        }
    }
}

impl StepFigure {
    /// What it reads, in one line.
    pub(crate) fn describe(&self) -> String {
        let what = if self.tally.shared() {
            "this step's share of the node's energy"
        } else {
            "the node's energy since this step began"
        };
        format!(
            "{what}, from slurmd's ledger {}",
            self.client.ledger().display()
        )
    }

    /// The step's figure now, asked of slurmd at each of Slurm's calls (no thread, no
    /// counter to wrap): as a reading, the energy so far and its power.
    pub(crate) fn read(&mut self) -> Reading {
        // the figure is as of this call: a sample slurmd takes for its ring comes after it,
        // and is not brought forward by the time slurmd then took to write it (at a power
        // over a window that may reach back before a fall, that would count energy after a
        // step's end into its last figure, or leave it out of its first)
        let called = unix_now();
        let seen = self.seen(called);
        let want = self.life.want(
            seen,
            self.tally.counted(),
            self.tally.brings_forward(),
            self.pid,
        );
        let key = self.step();
        let Fetched {
            answer: loaded,
            unanswered,
        } = self.client.figure(key, want, called);
        if !self.tally.knows_start() {
            let started = self.procs.started(self.pid).map(unix);
            self.tally.started(started);
        }
        let counted = match loaded {
            Ok(Some(view)) => {
                let age = called - view.sampled_at;
                // a slurmd that does not answer within ANSWER_WAIT at an edge, or whose
                // ledger is late at an sstat read, is gone or starved: the figure is then
                // older than the call, by how much is said at each such read (a step asks
                // at its edges only: its first and last reads, and sstat's where plugins are
                // stacked or the ledger is late), so any figure's error can be bounded
                if unanswered && age > 0.0 {
                    let taken = if self.tally.brings_forward() {
                        format!(
                            "brought forward (at most {:.0} s, at its power) from",
                            LEDGER_PERIOD.as_secs_f64()
                        )
                    } else {
                        "as of".to_string()
                    };
                    log::warn!(
                        "slurmd did not answer this step's request for a fresh energy ledger: \
                         its figure is {taken} the ledger's last sample, {age:.1} s ago"
                    );
                }
                self.tally.count(&view, called).map_err(|Stale { age }| {
                    format!(
                        "the energy ledger {} is {age:.0} s old (slurmd is not sampling)",
                        self.client.ledger().display()
                    )
                })
            }
            Ok(None) => Err(format!(
                "there is no energy ledger {} (slurmd does not run this plugin, or cannot \
                 write its spool dir)",
                self.client.ledger().display()
            )),
            Err(e) => Err(e.to_string()),
        };
        let watts = match counted {
            Ok(watts) => {
                if self.trouble.take().is_some() {
                    log::info!("the energy ledger is read again");
                }
                Some(watts)
            }
            Err(why) => {
                if self.trouble.is_none() {
                    if self.tally.counted() {
                        log::error!(
                            "{why}; this step keeps its figure of {:.0} J until it can read \
                             the ledger again",
                            self.tally.total_uj() as f64 / 1e6
                        );
                    } else {
                        log::error!("{why}; this step's energy is unavailable");
                    }
                }
                self.trouble = Some(why);
                None
            }
        };
        Reading {
            energy_uj: self.tally.total_uj(),
            // a step that never read the ledger has no figure (NO_VAL), not 0 J
            complete: self.tally.counted(),
            problems: Vec::new(),
            watts,
            unsettled: false,
            parts: self.tally.parts().to_vec(),
            ..Reading::default()
        }
    }
}

#[cfg(test)]
mod tests;
