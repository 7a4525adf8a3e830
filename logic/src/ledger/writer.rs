//! The ledger file written off slurmd's sample: the keeper hands each update's ledger to a
//! thread of its own, which replaces the file (a temporary file written and renamed: a
//! file system's work, hundreds of microseconds on a busy disk, that no sample waits for).
//! Only the latest update waits: one the thread has not reached yet is replaced by the next.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Ledger;
use crate::scheduler::worker::Worker;

/// Where the file goes, and what its thread has to write.
struct Shared {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The latest update not yet written.
    pending: Option<Ledger>,
    /// A failure to write is logged once per episode.
    failing: bool,
}

/// Writes the ledger file, in a thread of its own where one was started.
pub(super) struct Writer {
    shared: Arc<Shared>,
    /// `None`: the file is written in the caller's thread (no thread was asked for, or it
    /// could not start).
    worker: Option<Worker>,
}

impl Writer {
    /// Writes to `path` in the caller's thread.
    pub(super) fn inline(path: &Path) -> Self {
        Self {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                state: Mutex::new(State::default()),
            }),
            worker: None,
        }
    }

    /// Writes in a thread of its own from now on; where it cannot start (said), in the
    /// caller's still.
    pub(super) fn off_the_sample(&mut self) {
        let shared = Arc::clone(&self.shared);
        match Worker::spawn("energy-ledger", move |control| {
            while control.wait(None) {
                shared.write_pending();
            }
        }) {
            Ok(worker) => self.worker = Some(worker),
            Err(e) => log::warn!("{e}; slurmd's samples write the energy ledger themselves"),
        }
    }

    /// Has `ledger` written: at once in the caller's thread, else by the thread, which
    /// this wakes.
    pub(super) fn write(&mut self, ledger: &Ledger) {
        self.shared.lock().pending = Some(ledger.clone());
        match &self.worker {
            Some(worker) if !worker.has_ended() => worker.control().wake(),
            _ => self.shared.write_pending(),
        }
    }

    /// Writes `ledger` in the caller's thread, after stopping the thread: slurmd stops,
    /// and the file is what it continues from (an update the thread had not reached is
    /// older than this one).
    pub(super) fn finish(&mut self, ledger: &Ledger) {
        self.worker = None;
        self.shared.lock().pending = Some(ledger.clone());
        self.shared.write_pending();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the pending update, if any: outside the lock, so the keeper never waits for
    /// the file system.
    fn write_pending(&self) {
        let Some(ledger) = self.lock().pending.take() else {
            return;
        };
        let written = ledger.store(&self.path);
        let mut state = self.lock();
        match written {
            Ok(()) if state.failing => {
                log::info!("the energy ledger is published again");
                state.failing = false;
            }
            Ok(()) => {}
            Err(e) if !state.failing => {
                log::error!("{e}; steps see their energy as of the last ledger written");
                state.failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn sampled_at(path: &Path) -> Option<f64> {
        Ledger::load(path).ok().flatten().map(|l| l.sampled_at())
    }

    fn ledger_at(at: f64) -> Ledger {
        Ledger {
            sampled_at: at,
            ..Ledger::default()
        }
    }

    /// The thread writes each update handed to it; slurmd's stop writes the last in the
    /// caller's thread, whatever the thread had not reached.
    #[test]
    fn the_thread_writes_the_latest_update_and_the_stop_the_last() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let mut writer = Writer::inline(&path);
        writer.off_the_sample();
        assert!(writer.worker.is_some());
        for at in [10.0, 11.0, 12.0] {
            writer.write(&ledger_at(at));
            let until = Instant::now() + Duration::from_secs(2);
            while sampled_at(&path) != Some(at) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(sampled_at(&path), Some(at), "written by the thread");
        }
        writer.finish(&ledger_at(13.0));
        assert!(writer.worker.is_none(), "stopped");
        assert_eq!(sampled_at(&path), Some(13.0), "written as slurmd stops");
    }

    /// Without a thread, each update is written before `write` returns.
    #[test]
    fn inline_each_update_is_written_at_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let mut writer = Writer::inline(&path);
        writer.write(&ledger_at(5.0));
        assert_eq!(sampled_at(&path), Some(5.0));
    }
}
