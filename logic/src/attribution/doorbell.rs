//! A step's request for a fresh ledger, at its edges.
//!
//! slurmd samples the node and updates the ledger about once a second, no more (every
//! periodic wakeup is noise in the jobs of a compute node); between samples a step's figure
//! is brought forward at the last power. At a step's edges that is not good enough: its
//! tasks end and the node's power falls within that second, and the figure at the step's
//! last poll is its final one. So a slurmstepd at an edge (its first read, and a read once
//! its tasks are gone) rings slurmd's doorbell, a datagram socket beside the ledger, and
//! waits a few milliseconds for the ledger to be sampled anew. slurmd answers from a thread
//! that sleeps in `recv`: it wakes for rings only, twice per step.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, SystemTime};

use crate::worker::Worker;

/// How long a step waits at an edge for slurmd to publish a fresh ledger, at most: a
/// sample is microseconds of reads and a file written, so slurmd answers in milliseconds
/// unless it is gone, when the step goes on with what it has.
const ANSWER_WAIT: Duration = Duration::from_millis(100);
const POLL: Duration = Duration::from_millis(2);
/// A ledger this young at a step's edge is its figure's end, to a few joules.
const FRESH: Duration = Duration::from_millis(10);

/// Where the doorbell of the ledger at `ledger` is: beside it.
pub fn doorbell_path(ledger: &Path) -> PathBuf {
    ledger.with_extension("bell")
}

/// slurmd's side: a thread that calls `answer` at each ring.
pub struct Doorbell {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    worker: Option<Worker>,
}

impl Doorbell {
    /// Listens at `path` (replacing an earlier slurmd's socket), readable by root only.
    pub fn open(path: &Path, answer: impl Fn() + Send + 'static) -> Result<Self, String> {
        let what = |e: std::io::Error| format!("cannot listen at {}: {e}", path.display());
        match fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(what(e)),
            _ => {}
        }
        let socket = UnixDatagram::bind(path).map_err(what)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(what)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let worker = Worker::spawn("energy-doorbell", move |_| {
            let mut buf = [0u8; 8];
            loop {
                match socket.recv(&mut buf) {
                    Ok(_) if stop.load(Ordering::SeqCst) => return,
                    Ok(_) => answer(),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::error!("the energy ledger's doorbell failed: {e}");
                        return;
                    }
                }
            }
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            stopping,
            worker: Some(worker),
        })
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // the thread sleeps in recv: a last datagram wakes it to see that it must stop
        self.stopping.store(true, Ordering::SeqCst);
        ring(&self.path);
        drop(self.worker.take());
        let _ = fs::remove_file(&self.path);
    }
}

/// Rings the doorbell at `path`; whether anyone listens there.
fn ring(path: &Path) -> bool {
    UnixDatagram::unbound()
        .and_then(|s| {
            s.set_nonblocking(true)?;
            s.send_to(b"ring", path)
        })
        .is_ok()
}

/// slurmstepd's side: rings and waits until `ledger` is written anew (at most
/// [`ANSWER_WAIT`]); whether it was.
pub fn freshen(doorbell: &Path, ledger: &Path) -> bool {
    // a file's time is the kernel's coarse clock (a few milliseconds behind ours): a
    // ledger written within FRESH before asking is fresh enough, and needs no ring
    let asked = SystemTime::now() - FRESH;
    let written = || {
        fs::metadata(ledger)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= asked)
    };
    if written() {
        return true;
    }
    if !ring(doorbell) {
        return false;
    }
    let mut waited = Duration::ZERO;
    while waited < ANSWER_WAIT {
        if written() {
            return true;
        }
        sleep(POLL);
        waited += POLL;
    }
    written()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    #[test]
    fn a_ring_is_answered_and_the_step_waits_for_the_ledger() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (bell, ledger) = (tmp.path().join("bell"), tmp.path().join("ledger"));
        let rings = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&rings);
        let written = ledger.clone();
        let doorbell = Doorbell::open(&bell, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            fs::write(&written, "{}").expect("ledger");
        })
        .expect("doorbell");
        let mode = fs::metadata(&bell).expect("socket").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(freshen(&bell, &ledger));
        assert_eq!(rings.load(Ordering::SeqCst), 1);
        // written a moment ago: fresh, no ring
        assert!(freshen(&bell, &ledger));
        assert_eq!(rings.load(Ordering::SeqCst), 1);
        sleep(FRESH * 2);
        assert!(freshen(&bell, &ledger));
        assert_eq!(rings.load(Ordering::SeqCst), 2);
        let t0 = Instant::now();
        drop(doorbell);
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        assert!(!bell.exists(), "the socket is removed");
        // nobody listens: the step does not wait
        sleep(FRESH * 2);
        let t0 = Instant::now();
        assert!(!freshen(&bell, &ledger));
        assert!(t0.elapsed() < Duration::from_millis(10));
    }

    #[test]
    fn a_step_waits_no_longer_than_the_answer_wait() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (bell, ledger) = (tmp.path().join("bell"), tmp.path().join("ledger"));
        // slurmd listens but never writes (hung)
        let _doorbell = Doorbell::open(&bell, || {}).expect("doorbell");
        let t0 = Instant::now();
        assert!(!freshen(&bell, &ledger));
        let waited = t0.elapsed();
        assert!(
            waited >= ANSWER_WAIT && waited < ANSWER_WAIT * 3,
            "{waited:?}"
        );
    }
}
