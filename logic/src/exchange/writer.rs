//! The ledger file and the metrics file written off slurmd's sample: the publisher hands
//! each update's ledger to a thread of its own, which replaces the ledger file (a temporary file
//! written and renamed: a file system's work, hundreds of microseconds on a busy disk, that
//! no sample waits for) and hands it to the sink (the Prometheus file, where set:
//! rendered and replaced, 0.4 ms at one job and 4 ms at 256 when the sample did it). Only
//! the latest update waits: one the thread has not reached yet is replaced by the next.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::attribution::grant::Owner;
use crate::ledger::Ledger;
use crate::scheduler::worker::Worker;

/// What is told the ledger at each update, and who runs each job when asked for (the
/// metrics file's writer).
pub(crate) type Sink = Box<dyn FnMut(&Ledger, Option<&HashMap<u32, Owner>>) + Send>;

/// Where the file goes, and what its thread has to write.
struct Shared {
    path: PathBuf,
    state: Mutex<State>,
    /// Locked by the writing thread only: the keeper never waits for a render.
    publish: Mutex<Option<Sink>>,
}

#[derive(Default)]
struct State {
    /// The latest update not yet written.
    pending: Option<Update>,
    /// A failure to write is logged once per episode.
    failing: bool,
}

/// An update handed to the writer.
struct Update {
    /// The keeper's, dropped once written: the keeper copies it only while this holds it.
    ledger: Arc<Ledger>,
    /// Who runs each job, for a sink that shows owners.
    owners: Option<HashMap<u32, Owner>>,
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
                publish: Mutex::new(None),
            }),
            worker: None,
        }
    }

    /// Also hands each update to `publish`, after the file.
    pub(super) fn publishing(&mut self, publish: Sink) {
        *self.shared.sink() = Some(publish);
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

    /// Has `ledger` written and published (with `owners`, for a sink that shows
    /// them): at once in the caller's thread, else by the thread, which this wakes. An
    /// update not reached yet is replaced by this one.
    pub(super) fn write(&mut self, ledger: &Arc<Ledger>, owners: Option<HashMap<u32, Owner>>) {
        self.shared.lock().pending = Some(Update {
            ledger: Arc::clone(ledger),
            owners,
        });
        match &self.worker {
            Some(worker) if !worker.has_ended() => worker.control().wake(),
            _ => self.shared.write_pending(),
        }
    }

    /// Writes `ledger` in the caller's thread, after stopping the thread: slurmd stops,
    /// and the file is what it continues from (an update the thread had not reached is
    /// older than this one).
    pub(super) fn finish(&mut self, ledger: &Arc<Ledger>) {
        self.worker = None;
        self.shared.lock().pending = Some(Update {
            ledger: Arc::clone(ledger),
            owners: None,
        });
        self.shared.write_pending();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sink(&self) -> MutexGuard<'_, Option<Sink>> {
        self.publish.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the pending update, if any, and publishes it: outside the update's lock, so
    /// the keeper never waits for the file system.
    fn write_pending(&self) {
        let Some(update) = self.lock().pending.take() else {
            return;
        };
        self.store(&update.ledger);
        if let Some(publish) = self.sink().as_mut() {
            publish(&update.ledger, update.owners.as_ref());
        }
    }

    /// Replaces the ledger file with `ledger`; a failure is said once per episode.
    fn store(&self, ledger: &Ledger) {
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

    fn ledger_at(at: f64) -> Arc<Ledger> {
        let account = serde_json::json!({"joules": 0.0, "watts": 0.0, "since": 0.0});
        let text = serde_json::json!({
            "version": crate::ledger::VERSION, "epoch": 1, "sampled_at": at,
            "node": account, "parts": [], "jobs": [],
        });
        Arc::new(Ledger::parse(text.to_string().as_bytes()).expect("a ledger"))
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
            writer.write(&ledger_at(at), None);
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

    /// The sink is handed each update with its owners, in the writer's thread, and
    /// an update only published leaves the file as it was.
    #[test]
    fn each_update_is_published_in_the_writers_thread() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let (tx, rx) = std::sync::mpsc::channel();
        let mut writer = Writer::inline(&path);
        writer.publishing(Box::new(move |ledger, owners| {
            let thread = std::thread::current().name().map(String::from);
            let users = owners.map(|o| o.values().map(|o| o.user.clone()).collect::<Vec<_>>());
            let _ = tx.send((ledger.sampled_at(), users, thread));
        }));
        writer.off_the_sample();
        let owners = HashMap::from([(7, Owner { user: "ada".into() })]);
        writer.write(&ledger_at(20.0), Some(owners));
        let published = rx.recv_timeout(Duration::from_secs(2)).expect("published");
        assert_eq!(
            published,
            (
                20.0,
                Some(vec!["ada".to_string()]),
                Some("energy-ledger".to_string())
            )
        );
        assert_eq!(sampled_at(&path), Some(20.0));
        writer.write(&ledger_at(21.0), None);
        let published = rx.recv_timeout(Duration::from_secs(2)).expect("published");
        assert_eq!(published.0, 21.0);
        assert_eq!(published.1, None);
        assert_eq!(sampled_at(&path), Some(21.0));
    }

    /// Without a thread, each update is written before `write` returns.
    #[test]
    fn inline_each_update_is_written_at_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy-ledger.0.json");
        let mut writer = Writer::inline(&path);
        writer.write(&ledger_at(5.0), None);
        assert_eq!(sampled_at(&path), Some(5.0));
    }
}
