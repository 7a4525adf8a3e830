//! A step's request for a fresh ledger, at its edges.
//!
//! slurmd samples the node and updates the ledger about once a second, no more (every
//! periodic wakeup is noise in the jobs of a compute node); between samples a step's figure
//! is brought forward at the last power. At a step's edges that is not good enough: its
//! tasks end and the node's power falls within that second, and the figure at the step's
//! last poll is its final one. So a slurmstepd at an edge (its first read, and a read once
//! its tasks are gone) rings slurmd's doorbell, a datagram socket beside the ledger, and
//! waits for the ledger to be sampled anew (milliseconds; at most [`MIN_UPDATE_GAP`] more
//! when it was updated just before). slurmd answers from a thread that sleeps in `recv`:
//! it wakes for rings only, twice per step.
//!
//! Users ring too: every `sstat` of a step is a read outside Slurm's periodic polls, and a
//! job may run an `sstat` loop, or thousands of steps. However they ring, slurmd updates the
//! ledger no sooner than [`MIN_UPDATE_GAP`] after its last update ([`Pace`]): a ring within
//! that time is answered by the next update, at its end, with every ring that came
//! meanwhile.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use crate::worker::Worker;

/// The least time between two updates of the ledger, however often steps ring: a sample
/// reads the hardware and every step's cgroup and rewrites the ledger (and the metrics
/// file), and a job's owner decides how often their steps ring (an `sstat` loop in every
/// job). A quarter of a second keeps slurmd to four samples a second at most, and costs a
/// step's last figure at most that much of waiting (and nothing when no update came in
/// the quarter second before it rang).
pub const MIN_UPDATE_GAP: Duration = Duration::from_millis(250);
/// How long a step waits at an edge for slurmd to publish a fresh ledger, at most: the
/// update that answers may wait [`MIN_UPDATE_GAP`], and a sample is microseconds of reads
/// and a file written, so slurmd answers within that gap and milliseconds unless it is
/// gone, when the step goes on with what it has.
pub const ANSWER_WAIT: Duration = MIN_UPDATE_GAP.saturating_add(Duration::from_millis(150));
const POLL: Duration = Duration::from_millis(2);
/// A ledger this young at a step's edge is its figure's end, to a few joules.
const FRESH: Duration = Duration::from_millis(10);

/// Where the doorbell of the ledger at `ledger` is: beside it.
pub fn doorbell_path(ledger: &Path) -> PathBuf {
    ledger.with_extension("bell")
}

/// When slurmd last updated the ledger, and whether a step asks for a new one: shared by
/// slurmd's keeper, which decides at each sample whether to update ([`Pace::take`]), and
/// its doorbell, which wakes the sampler for an update no sooner than it may be taken
/// ([`Pace::ask`]).
#[derive(Debug, Default)]
pub struct Pace(Mutex<Paced>);

#[derive(Debug, Default)]
struct Paced {
    updated: Option<Instant>,
    wanted: bool,
}

impl Pace {
    fn lock(&self) -> std::sync::MutexGuard<'_, Paced> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A step asks for an update at `now`: how long until the update that answers it may
    /// be taken (zero: at once).
    pub fn ask(&self, now: Instant) -> Duration {
        let mut paced = self.lock();
        paced.wanted = true;
        paced.updated.map_or(Duration::ZERO, |t| {
            (t + MIN_UPDATE_GAP).saturating_duration_since(now)
        })
    }

    /// Whether a sample at `now` updates the ledger: the first does, one a step asked for
    /// does [`MIN_UPDATE_GAP`] or more after the last update, any does `interval` or more
    /// after it. When it does, it is the last update and answers every ask before it.
    pub fn take(&self, now: Instant, interval: Duration) -> bool {
        let mut paced = self.lock();
        let due = match paced.updated.map(|t| now.saturating_duration_since(t)) {
            None => true,
            Some(since) => since >= interval || (paced.wanted && since >= MIN_UPDATE_GAP),
        };
        if due {
            paced.updated = Some(now);
            paced.wanted = false;
        }
        due
    }
}

/// slurmd's side: a thread that calls `answer` at each ring, or once for the rings that
/// came until the update they ask for may be taken ([`Pace::ask`]).
pub struct Doorbell {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    worker: Option<Worker>,
}

impl Doorbell {
    /// Listens at `path` (replacing an earlier slurmd's socket), readable by root only;
    /// `pace` says when an update may answer.
    pub fn open(
        path: &Path,
        pace: Arc<Pace>,
        answer: impl Fn() + Send + 'static,
    ) -> Result<Self, String> {
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
            let failed =
                |e: std::io::Error| log::error!("the energy ledger's doorbell failed: {e}");
            loop {
                match socket.recv(&mut buf) {
                    Ok(_) if stop.load(Ordering::SeqCst) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return failed(e),
                }
                // until the update may be taken, the rings that come are answered by it
                // (each asks again: an update taken meanwhile answered only those before)
                let mut wait = pace.ask(Instant::now());
                while !wait.is_zero() {
                    if let Err(e) = socket.set_read_timeout(Some(wait)) {
                        return failed(e);
                    }
                    wait = match socket.recv(&mut buf) {
                        Ok(_) if stop.load(Ordering::SeqCst) => return,
                        Ok(_) => pace.ask(Instant::now()),
                        Err(e) if is_timeout(&e) => Duration::ZERO,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                            pace.ask(Instant::now())
                        }
                        Err(e) => return failed(e),
                    };
                }
                if let Err(e) = socket.set_read_timeout(None) {
                    return failed(e);
                }
                answer();
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

/// Whether a `recv` ended at its timeout (`EAGAIN`, which std reports as either kind).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
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

/// How fresh the ledger a step reads is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Written just before the step asked: no ring needed.
    Recent,
    /// Written after the step rang: its sample may be a moment after the step's call.
    Answered,
    /// Nobody answered within [`ANSWER_WAIT`] (or nobody listens).
    Unanswered,
}

impl Freshness {
    pub fn is_fresh(self) -> bool {
        self != Self::Unanswered
    }
}

/// slurmstepd's side: rings and waits until `ledger` is written anew (at most
/// [`ANSWER_WAIT`]).
pub fn freshen(doorbell: &Path, ledger: &Path) -> Freshness {
    // a file's time is the kernel's coarse clock (a few milliseconds behind ours): a
    // ledger written within FRESH before asking is fresh enough, and needs no ring
    let asked = SystemTime::now() - FRESH;
    let written = || {
        fs::metadata(ledger)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= asked)
    };
    if written() {
        return Freshness::Recent;
    }
    if !ring(doorbell) {
        return Freshness::Unanswered;
    }
    let mut waited = Duration::ZERO;
    while waited < ANSWER_WAIT {
        if written() {
            return Freshness::Answered;
        }
        sleep(POLL);
        waited += POLL;
    }
    if written() {
        Freshness::Answered
    } else {
        Freshness::Unanswered
    }
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
        let doorbell = Doorbell::open(&bell, Arc::default(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
            fs::write(&written, "{}").expect("ledger");
        })
        .expect("doorbell");
        let mode = fs::metadata(&bell).expect("socket").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(freshen(&bell, &ledger).is_fresh());
        assert_eq!(rings.load(Ordering::SeqCst), 1);
        // written a moment ago: fresh, no ring
        assert!(freshen(&bell, &ledger).is_fresh());
        assert_eq!(rings.load(Ordering::SeqCst), 1);
        sleep(FRESH * 2);
        assert!(freshen(&bell, &ledger).is_fresh());
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
        assert!(!freshen(&bell, &ledger).is_fresh());
        assert!(t0.elapsed() < Duration::from_millis(10));
    }

    /// Samples every 100 ms, a step asking at each: an update every 250 ms, each answering
    /// the asks before it; without asks, one every interval.
    #[test]
    fn asks_are_answered_no_sooner_than_the_gap_after_the_last_update() {
        let pace = Pace::default();
        let t0 = Instant::now();
        let interval = Duration::from_millis(500);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(pace.take(at(0), interval), "the first sample updates");
        let mut updates = vec![];
        for ms in (100..=2000).step_by(100) {
            let wait = pace.ask(at(ms));
            let taken = pace.take(at(ms), interval);
            assert_eq!(taken, wait.is_zero(), "at {ms} ms");
            if taken {
                updates.push(ms);
            }
        }
        // 300 ms: the first sample 250 ms or more after the update at 0
        assert_eq!(updates, [300, 600, 900, 1200, 1500, 1800]);
        // the asks at 1900 and 2000 ms are answered by the first sample after the gap
        assert!(pace.take(at(2100), interval));
        // then nobody asks: an update every interval
        assert!(!pace.take(at(2400), interval));
        assert!(pace.take(at(2600), interval));
        // an ask 50 ms after an update waits the rest of the gap
        assert_eq!(pace.ask(at(2650)), Duration::from_millis(200));
    }

    /// 1 000 rings in a burst (an `sstat` loop in every job) cause at most one update per
    /// [`MIN_UPDATE_GAP`] (ceil(T / 0.25 s) + 1 over T), and the last ring is answered.
    #[test]
    fn a_burst_of_rings_makes_a_few_updates_a_second() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bell = tmp.path().join("bell");
        let pace = Arc::new(Pace::default());
        let updates = Arc::new(Mutex::new(Vec::new()));
        let (taker, taken) = (Arc::clone(&pace), Arc::clone(&updates));
        // the sampler's part: a sample at each wake, an update when the pace allows
        let _doorbell = Doorbell::open(&bell, Arc::clone(&pace), move || {
            let now = Instant::now();
            if taker.take(now, Duration::from_secs(1)) {
                taken.lock().expect("updates").push(now);
            }
        })
        .expect("doorbell");
        let t0 = Instant::now();
        let (mut rung, mut last_ring) = (0, t0);
        for k in 0..1000 {
            // the socket's queue holds a few hundred: a ring beyond is refused, as a step
            // that rings then does not wait
            let sent = Instant::now();
            if ring(&bell) {
                rung += 1;
                last_ring = sent;
            }
            if k % 100 == 99 {
                sleep(Duration::from_millis(50));
            }
        }
        sleep(MIN_UPDATE_GAP * 2 + Duration::from_millis(100));
        let updates = updates.lock().expect("updates").clone();
        let last = *updates.last().expect("an update");
        assert!(last >= last_ring, "the last ring is answered");
        let span = last.duration_since(t0).as_secs_f64();
        let most = (span / MIN_UPDATE_GAP.as_secs_f64()).ceil() as usize + 1;
        assert!(
            updates.len() <= most,
            "{} updates for {rung} rings over {span:.3} s",
            updates.len()
        );
        for pair in updates.windows(2) {
            assert!(pair[1].duration_since(pair[0]) >= MIN_UPDATE_GAP);
        }
        println!(
            "{rung} rings over {:.3} s: {} updates",
            last_ring.duration_since(t0).as_secs_f64(),
            updates.len()
        );
    }

    #[test]
    fn a_step_waits_no_longer_than_the_answer_wait() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (bell, ledger) = (tmp.path().join("bell"), tmp.path().join("ledger"));
        // slurmd listens but never writes (hung)
        let _doorbell = Doorbell::open(&bell, Arc::default(), || {}).expect("doorbell");
        let t0 = Instant::now();
        assert!(!freshen(&bell, &ledger).is_fresh());
        let waited = t0.elapsed();
        assert!(
            waited >= ANSWER_WAIT && waited < ANSWER_WAIT * 3,
            "{waited:?}"
        );
    }
}
