//! slurmd's end of the exchange: each update of the ledger, published on every channel.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::ask::Book;
use super::doorbell::Pace;
use super::slots::Table;
use super::writer::{Sink, Writer};
use crate::attribution::grant::Owner;
use crate::ledger::Ledger;

/// Publishes the keeper's ledger to the node's steps: the answers to their questions, the
/// slots, the ledger file (and the sink beside it, where set); and paces the updates the
/// steps ask for on the doorbell.
pub(crate) struct Publisher {
    /// When the ledger was last updated, and whether a step asked for a fresh one
    /// ([`super::doorbell`]): the next sample updates it as the pace of rings allows,
    /// however often steps ring.
    pace: Arc<Pace>,
    /// What steps' questions are answered from, kept at each update ([`super::ask`]).
    book: Arc<Book>,
    /// The slots file, for the steps' periodic polls ([`super::slots`]), and whether its
    /// last write failed (said once per episode).
    slots: Table,
    slots_failing: bool,
    /// Writes the ledger file at every update ([`super::writer`]). Steps ask slurmd for
    /// their figures, but the file is what a step reads while slurmd does not answer (a
    /// step's edge past its wait, a slurmd killed or restarting), what a slurmd started
    /// again continues from, and what `senergy` reads: written every 5 s instead, a slurmd
    /// killed mid-job left its jobs up to 5 s of energy short (123 J for 631 J in
    /// `cluster::a_slurmd_killed_mid_job_loses_nothing...`), and sstat and the BMC tests
    /// read figures seconds old.
    writer: Writer,
}

impl Publisher {
    /// Publishes the ledger file `ledger` and the channels beside it, in the caller's
    /// thread.
    pub(crate) fn new(ledger: &Path) -> Self {
        Self {
            pace: Arc::default(),
            book: Arc::default(),
            slots: Table::new(ledger),
            slots_failing: false,
            writer: Writer::inline(ledger),
        }
    }

    /// Also hands the ledger to `sink` at each update (the metrics file).
    pub(crate) fn sinking(&mut self, sink: Sink) {
        self.writer.publishing(sink);
    }

    /// Writes the ledger file in a thread of its own, off slurmd's samples.
    pub(crate) fn off_the_sample(&mut self) {
        self.writer.off_the_sample();
    }

    /// Told by the doorbell that a step asks for a fresh ledger; paces the updates.
    pub(crate) fn pace(&self) -> &Arc<Pace> {
        &self.pace
    }

    /// What steps' questions are answered from.
    pub(crate) fn book(&self) -> &Arc<Book> {
        &self.book
    }

    /// Publishes `ledger`, updated from a reading taken at `taken` (with who runs each job
    /// for a sink that shows them): the questions asked before that reading are answered.
    pub(crate) fn publish(
        &mut self,
        ledger: &Arc<Ledger>,
        owners: Option<HashMap<u32, Owner>>,
        taken: Instant,
    ) {
        self.writer.write(ledger, owners);
        self.book.update(ledger, taken);
        match self.slots.write(ledger) {
            Ok(()) => self.slots_failing = false,
            Err(e) if !self.slots_failing => {
                log::error!("{e}; steps ask slurmd for their figures at every poll");
                self.slots_failing = true;
            }
            Err(_) => {}
        }
    }

    /// slurmd stops: the file is written as `ledger` is, what it continues from.
    pub(crate) fn finish(&mut self, ledger: &Arc<Ledger>) {
        self.writer.finish(ledger);
    }
}
