//! The search of /proc for the slurmstepds a grant does not name (a grant not written yet,
//! or written by a plugin of before): one pass over every process of the host and the
//! kernel's socket table, whose cost is the node's users' to size (10^5 processes make a
//! pass take seconds). So a pass runs on a thread of its own: slurmd's sampler waits for
//! it [`SCAN_WAIT`] at most (a node's few hundred processes take a few ms) and takes a
//! longer pass's answer at a later sample; passes are [`SCAN_GAP`] apart at least, and one
//! at a time.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Procs, StepKey, unix_sockets};
use crate::guard::guard;

/// The passes over /proc for new steps' slurmstepds are this far apart at least: at most 2
/// a second, however many steps start (a step not searched waits for the next pass, at
/// most this long). A pass reads each process's owner, the titles of slurmd's user's
/// processes, the kernel's unix sockets once, and the `fd/` of the candidates.
pub const SCAN_GAP: Duration = Duration::from_millis(500);

/// How long slurmd's sampler waits for a pass it started: a longer one (a host of tens of
/// thousands of processes) is answered at a later sample, and the sampler goes on. A new
/// step meets a pass at its first sample (slurmstepd binds the step's socket, and may ask
/// for its first figure, before it writes its grant), and a step not placed then is
/// charged nothing for that sample (its share, its GPUs' use): the wait covers a node's few
/// hundred processes under load, and stays under the 100 ms a step's read waits for
/// slurmd's answer (`runtime::step::StepFigure`), which a longer hold of the sampler would leave
/// unanswered.
pub const SCAN_WAIT: Duration = Duration::from_millis(80);

/// What one pass found: the steps it searched, and the slurmstepd of those it found.
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    /// The steps searched (those not in `stepds` were not found).
    pub searched: HashSet<StepKey>,
    /// Each found step's slurmstepd.
    pub stepds: HashMap<StepKey, u32>,
}

/// The passes over /proc: when the last began, the one running (if any), and whether the
/// kernel's socket table failed at the last (logged once per episode).
#[derive(Default)]
pub struct Scans {
    last: Option<Instant>,
    failing: Arc<AtomicBool>,
    pass: Option<Pass>,
}

/// A pass on its thread.
struct Pass {
    searched: HashSet<StepKey>,
    answer: mpsc::Receiver<HashMap<StepKey, u32>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Scans {
    /// The answer of a pass for the `wanted` steps (by their sockets' paths in
    /// SlurmdSpoolDir): of the one running, if it has ended; else of one begun now, where
    /// the last began [`SCAN_GAP`] ago, if it ends within [`SCAN_WAIT`]. A slurmstepd is a
    /// process of real uid `uid`, titled as the step's, holding the socket bound at its
    /// path. `None` while no pass has an answer.
    pub fn stepds(
        &mut self,
        procs: &Procs,
        wanted: &HashMap<StepKey, &Path>,
        uid: u32,
    ) -> Option<Found> {
        if self.pass.is_some() {
            return self.answer(Duration::ZERO);
        }
        if wanted.is_empty() {
            return None;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < SCAN_GAP)
        {
            return None;
        }
        self.last = Some(now);
        let searched: HashSet<StepKey> = wanted.keys().copied().collect();
        let owned: HashMap<StepKey, PathBuf> = wanted
            .iter()
            .map(|(step, path)| (*step, path.to_path_buf()))
            .collect();
        let (tell, answer) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let spawned = std::thread::Builder::new()
            .name("energy-scan".into())
            .spawn({
                let (procs, failing, stop) =
                    (procs.clone(), Arc::clone(&self.failing), Arc::clone(&stop));
                move || {
                    let found = guard("the search of /proc", HashMap::new(), || {
                        search(&procs, &owned, uid, &failing, &stop)
                    });
                    let _ = tell.send(found);
                }
            });
        match spawned {
            Ok(thread) => {
                self.pass = Some(Pass {
                    searched,
                    answer,
                    stop,
                    thread,
                });
                self.answer(SCAN_WAIT)
            }
            Err(e) => {
                log::error!(
                    "cannot start a thread to search /proc ({e}): searched on slurmd's sampler"
                );
                let owned = wanted.iter().map(|(s, p)| (*s, p.to_path_buf())).collect();
                let stepds = search(procs, &owned, uid, &self.failing, &stop);
                Some(Found { searched, stepds })
            }
        }
    }

    /// The running pass's answer, waited for `wait` at most.
    fn answer(&mut self, wait: Duration) -> Option<Found> {
        let stepds = match self.pass.as_ref()?.answer.recv_timeout(wait) {
            Ok(stepds) => stepds,
            Err(RecvTimeoutError::Timeout) => return None,
            // the guard answers even a panic: only a thread that never ran gets here
            Err(RecvTimeoutError::Disconnected) => HashMap::new(),
        };
        let pass = self.pass.take()?;
        let _ = pass.thread.join();
        Some(Found {
            searched: pass.searched,
            stepds,
        })
    }
}

/// How long slurmd's `fini` waits for a pass it stopped: a read of /proc can block while
/// the process read is stuck in the kernel (a task in D state holding its memory map).
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for Scans {
    /// A running pass is stopped at its next process and joined, so that no thread of the
    /// plugin runs on once Slurm unloads it; one blocked in a read of /proc longer than
    /// `STOP_WAIT` (2 s) is left, and said so: slurmd's end is not held by it.
    fn drop(&mut self) {
        let Some(pass) = self.pass.take() else {
            return;
        };
        pass.stop.store(true, Ordering::Relaxed);
        match pass.answer.recv_timeout(STOP_WAIT) {
            Err(RecvTimeoutError::Timeout) => log::error!(
                "a search of /proc for slurmstepds is still blocked in a read of /proc after \
                 {STOP_WAIT:?}: left running"
            ),
            _ => {
                let _ = pass.thread.join();
            }
        }
    }
}

/// One pass, on the calling thread: the candidates by title, then one question to the
/// kernel for the sockets of all of them; ends early, empty, once `stop` is set.
pub fn search(
    procs: &Procs,
    wanted: &HashMap<StepKey, PathBuf>,
    uid: u32,
    failing: &AtomicBool,
    stop: &AtomicBool,
) -> HashMap<StepKey, u32> {
    let steps: HashSet<StepKey> = wanted.keys().copied().collect();
    let candidates = procs.stepds(&steps, uid, stop);
    let sockets: Vec<&Path> = candidates
        .keys()
        .filter_map(|s| wanted.get(s).map(PathBuf::as_path))
        .collect();
    if sockets.is_empty() || stop.load(Ordering::Relaxed) {
        return HashMap::new();
    }
    let bound = match unix_sockets::sockets_bound_at(&sockets) {
        Ok(bound) => {
            if failing.swap(false, Ordering::Relaxed) {
                log::info!("the kernel tells again which unix sockets are bound where");
            }
            bound
        }
        Err(e) => {
            if !failing.swap(true, Ordering::Relaxed) {
                log::error!(
                    "{e}: new steps' slurmstepds are not found, and their jobs not charged \
                     apart, until it answers"
                );
            }
            return HashMap::new();
        }
    };
    // only the step's slurmstepd holds its socket: not a process titled as it, nor
    // another node's slurmstepd of the same step on the same host
    candidates
        .into_iter()
        .filter_map(|(step, pids)| {
            let held = bound.get(wanted.get(&step)?.as_path())?;
            Some((step, procs.holding(&pids, held)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::StepId;
    use crate::attribution::procs::tests::stepd;
    use std::fs::OpenOptions;
    use std::io::Write;

    /// A read of /proc that blocks (a process stuck in the kernel, here a FIFO as its
    /// `status`) holds slurmd's sampler [`SCAN_WAIT`], not until it returns; no second pass
    /// starts meanwhile, and the pass's answer comes at a later sample. Before, the search
    /// ran on the sampler's own thread, held as long as /proc was.
    #[test]
    fn a_pass_blocked_in_proc_holds_the_sampler_no_longer_than_its_wait() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("proc");
        let step = StepKey::new(5, StepId(0));
        let socket = tmp.path().join("spool/n1_5.0");
        let _held = stepd(&root, 40, step, "0::/", &socket);
        let blocking = root.join("41/status");
        std::fs::create_dir_all(blocking.parent().expect("dir")).expect("mkdir");
        nix::unistd::mkfifo(&blocking, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let procs = Procs::from_path(&root);
        let uid = nix::unistd::getuid().as_raw();
        let wanted: HashMap<StepKey, &Path> = [(step, socket.as_path())].into();
        let mut scans = Scans::default();

        let began = Instant::now();
        assert_eq!(scans.stepds(&procs, &wanted, uid), None);
        let held = began.elapsed();
        assert!(held >= SCAN_WAIT && held < SCAN_WAIT * 20, "{held:?}");
        std::thread::sleep(SCAN_GAP);
        let began = Instant::now();
        assert_eq!(scans.stepds(&procs, &wanted, uid), None);
        assert!(began.elapsed() < SCAN_WAIT, "{:?}", began.elapsed());

        // the stuck process answers (another user's): the pass ends, its answer is taken
        let mut fifo = OpenOptions::new()
            .write(true)
            .open(&blocking)
            .expect("open");
        fifo.write_all(b"Name:\tx\nUid:\t4321\t4321\t4321\t4321\n")
            .expect("write");
        drop(fifo);
        let until = Instant::now() + Duration::from_secs(10);
        let found = loop {
            if let Some(found) = scans.stepds(&procs, &wanted, uid) {
                break found;
            }
            assert!(Instant::now() < until, "the pass never answered");
            std::thread::sleep(Duration::from_millis(10));
        };
        let expected = Found {
            searched: [step].into(),
            stepds: [(step, 40)].into(),
        };
        assert_eq!(found, expected);
    }
}
