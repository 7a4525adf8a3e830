//! slurmstepd's figure of its step, from what slurmd's ledger says of it
//! ([`crate::exchange::Client`]).

use std::fs;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use crate::accounting::MAX_PARTS;
use crate::attribution::procs::Procs;
use crate::attribution::{StepId, StepKey, own_step, present_steps};
use crate::exchange::ask::{Answer, Want};
use crate::exchange::{Client, Fetched};
use crate::ledger::{LEDGER_PERIOD, MAX_GAP, RUN_SLACK, unix};
use crate::source::{PartReading, Reading, stale_after};

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
    /// Whether it reads its share (else the node's energy since it began): as the ledger's
    /// slurmd splits ([`Ledger::gives_shares`]), decided at its first read of each ledger;
    /// `configured` where the ledger does not say.
    shared: bool,
    /// What this slurmstepd's own acct_gather.conf says. After `scontrol reconfigure`
    /// slurmd splits by the new file while a step begun before read the old one.
    configured: bool,
    /// Whether it said that it follows slurmd's mode rather than its own configuration.
    said_mode: bool,
    /// Whether a figure is brought forward from the ledger's sample to the call.
    bring_forward: bool,
    step: Option<StepKey>,
    /// When this process started (Unix time), once read: a step of its name in the ledger
    /// begun before it is a run before this one.
    started: Option<f64>,
    /// Whether a read saw its tasks: their end is then its last edge.
    had_tasks: bool,
    /// An extern step: whether a read saw another step of its job (see
    /// [`StepFigure::extern_left_alone`]).
    saw_siblings: bool,
    /// Whether it rang for its last read ([`Ring::Last`]), which it does once.
    said_last: bool,
    /// What the step counted in the ledger it reads now.
    counted: Option<Counted>,
    /// What it counted in ledgers before this one.
    carried_uj: u64,
    /// The trouble with the ledger now, logged when it began.
    trouble: Option<String>,
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
            shared,
            configured: shared,
            said_mode: false,
            bring_forward: true,
            step: None,
            started: None,
            had_tasks: false,
            saw_siblings: false,
            said_last: false,
            counted: None,
            carried_uj: 0,
            trouble: None,
            parts: Vec::new(),
        }
    }

    /// Energy plugins are stacked: Slurm adds up what each answers since its answer before,
    /// so a figure brought forward at a power that then fell would stay counted. The
    /// ledger's figure is taken as it is: at Slurm's periodic polls at most a sample period
    /// old; at a step's edges and other reads (sstat's) from a sample taken for it.
    pub(crate) fn stacked(mut self) -> Self {
        self.bring_forward = false;
        self
    }

    fn step(&mut self) -> Option<StepKey> {
        if self.step.is_none() {
            let text = fs::read(self.procs.cmdline_path(self.pid)).ok()?;
            self.step = own_step(&String::from_utf8_lossy(&text).replace('\0', " "));
        }
        self.step
    }

    /// Whether this is an extern step whose job's other steps, seen before, are all gone.
    /// From 25.05 the extern step runs no task of its own: its main thread waits for the
    /// job's other steps to end, then makes the step's last read. Its main thread reads
    /// at no other moment once they have begun (sstat's reads and the periodic polls come
    /// from other threads). A step is present while its slurmstepd's socket is in the
    /// spool dir, which only root writes.
    fn extern_left_alone(&mut self) -> bool {
        let Some(StepKey {
            job,
            step: StepId::EXTERN,
        }) = self.step()
        else {
            return false;
        };
        let Some(spool) = self.client.ledger().parent() else {
            return false;
        };
        let siblings = present_steps(spool)
            .keys()
            .any(|k| k.job == job && k.step != StepId::EXTERN);
        self.saw_siblings |= siblings;
        self.saw_siblings && !siblings
    }

    /// Whether a step of this name begun at `since` (Unix time) is this run of it, not an
    /// earlier run of a requeued job the ledger still holds.
    fn this_run(&mut self, since: f64) -> bool {
        if self.started.is_none() {
            self.started = self.procs.started(self.pid).map(unix);
        }
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

    fn total_uj(&self) -> u64 {
        self.carried_uj + self.counted.map_or(0, |c| c.figure_uj)
    }

    /// Counts the step's figure in `ledger` at unix time `now`; returns its power, or why
    /// the ledger cannot be used.
    fn count(&mut self, ledger: &Answer, now: f64) -> Result<f64, String> {
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
            return Err(format!(
                "the energy ledger {} is {age:.0} s old (slurmd is not sampling)",
                self.client.ledger().display()
            ));
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

impl StepFigure {
    /// What it reads, in one line.
    pub(crate) fn describe(&self) -> String {
        let what = if self.shared {
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
        // at the step's edges (before its tasks start, after they end) the figure is the
        // step's first or last: it needs a ledger sampled now, and the step waits for it
        // (in slurmstepd's own threads). While tasks run, a read other than Slurm's
        // periodic polls (sstat's) asks for a fresh ledger where plugins are stacked, whose
        // figures are not brought forward, or where the ledger is older than a figure is
        // brought forward (slurmd is late): but it never waits, since slurmd holds an RPC
        // thread for an sstat until the step answers; its figure is the ledger's as it is
        // (said to be late when it is), and the next read finds the sample it asked for
        let periodic = self.counted.is_some()
            && self
                .procs
                .calling_thread()
                .is_some_and(|t| periodic_poll(&t));
        // a periodic poll of a step whose tasks were seen is no edge whatever its tasks are
        // now (its main thread takes the last read): they are not looked for, a walk of its
        // threads in /proc at each of Slurm's polls
        let tasks = (periodic && self.had_tasks) || !self.procs.children(self.pid).is_empty();
        // its tasks were seen and are gone, or it is an extern step its job's other steps
        // have left and its main thread reads: the step ends, and this is its last read
        // (said once; Slurm's reads after it find the same figure). Only a step without
        // tasks looks for its job's steps (25.05's extern step), at each read until then.
        let ended = if self.had_tasks {
            !tasks
        } else {
            !tasks
                && !self.said_last
                && self.extern_left_alone()
                && self.procs.calling_tid() == Some(self.pid)
        };
        let last = ended && !self.said_last;
        self.had_tasks |= tasks;
        let (edge, asks) = match self.counted {
            None => (!tasks, false),
            Some(_) => {
                // slurmd's last update is older than a figure is brought forward: as its
                // last answer said, or by the file's time where the step reads the file
                let late =
                    self.client
                        .late(self.counted.map(|c| c.sampled_at), called, LEDGER_PERIOD);
                (
                    !periodic && !tasks,
                    !periodic && tasks && (!self.bring_forward || late),
                )
            }
        };
        let key = self.step();
        let want = match (edge, last, asks) {
            (true, true, _) => Want::Last { stepd: self.pid },
            (true, false, _) => Want::Fresh,
            (false, _, true) => Want::Refresh,
            (false, _, false) => Want::Current,
        };
        let Fetched {
            answer: loaded,
            unanswered,
        } = self.client.figure(key, want, called);
        self.said_last |= edge && last;
        let counted = match loaded {
            Ok(Some(view)) => {
                let age = called - view.sampled_at;
                // a slurmd that does not answer within ANSWER_WAIT at an edge, or whose
                // ledger is late at an sstat read, is gone or starved: the figure is then
                // older than the call, by how much is said at each such read (a step asks
                // at its edges only: its first and last reads, and sstat's where plugins are
                // stacked or the ledger is late), so any figure's error can be bounded
                if unanswered && age > 0.0 {
                    let taken = if self.bring_forward {
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
                self.count(&view, called)
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
                    match self.counted {
                        Some(_) => log::error!(
                            "{why}; this step keeps its figure of {:.0} J until it can read \
                             the ledger again",
                            self.total_uj() as f64 / 1e6
                        ),
                        None => log::error!("{why}; this step's energy is unavailable"),
                    }
                }
                self.trouble = Some(why);
                None
            }
        };
        Reading {
            energy_uj: self.total_uj(),
            // a step that never read the ledger has no figure (NO_VAL), not 0 J
            complete: self.counted.is_some(),
            problems: Vec::new(),
            watts,
            unsettled: false,
            parts: self.parts.clone(),
            ..Reading::default()
        }
    }
}

#[cfg(test)]
mod tests;
