//! A step's request for a fresh ledger, at its edges.
//!
//! slurmd samples the node and updates the ledger about once a second, no more (every
//! periodic wakeup is noise in the jobs of a compute node); between samples a step's figure
//! is brought forward at the last power. At a step's edges that is not good enough: its
//! tasks end and the node's power falls within that second, and the figure at the step's
//! last poll is its final one. So a slurmstepd at an edge (its first read, and a read once
//! its tasks are gone) asks slurmd for a figure from a sample taken after its question
//! ([`super::ask`], on a stream socket beside the doorbell), and waits for it
//! (milliseconds); at other reads it asks for the figure as of slurmd's last update,
//! answered at once from memory. slurmd answers from a thread that sleeps in `poll`: it
//! wakes for questions and rings only.
//!
//! A slurmstepd whose slurmd does not listen for questions (one of before, not yet
//! restarted after an upgrade, or one starting again) rings the doorbell, a datagram socket
//! beside the ledger, and waits for the ledger file to be written anew, as before the
//! questions: slurmd writes the file at the next update after such a ring.
//!
//! A step's last read (its tasks gone) says so in its ring ([`Ring::Last`]): slurmd charges
//! it up to the sample that answers, then no more. Its slurmstepd lingers a second or more
//! after that read while Slurm cleans up (a killed step's `proctrack_g_wait`), and what it
//! would be charged then is in no figure Slurm records; the others on the node get it.
//! With its extern step's last read the job's accounting ends (its figure is the job's).
//!
//! Users ring too: every `sstat` of a step is a read outside Slurm's periodic polls, and a
//! job may run an `sstat` loop, or thousands of steps. However they ring, the updates rings
//! cause are paced ([`Pace`]): a bucket of [`RING_BURST`] updates, refilled at
//! [`RING_RATE`] a second. Steps' edges, a few at a time, are answered at once (their
//! figures exact); a flood of rings waits for the bucket, each update answering every ring
//! that came before it.
//!
//! Only slurmd's user reaches the socket, and only its word counts. The socket is bound in
//! a directory of its own, created 0700 by slurmd and checked to be its own and no link
//! ([`trusted_dir`]): a socket bound beside the ledger and made 0600 after `bind` could be
//! connected to by anyone in between, and a connected datagram socket sends for as long
//! as it lives. Binding under `umask(077)` instead would not do: the umask is the whole
//! process's, and slurmd's other threads (Slurm's RPC handlers, creating step sockets and
//! state files) would create their files under it meanwhile. And a `last` is taken only
//! from a sender the kernel says runs as slurmd's user (`Ring::heard`, from
//! `SCM_CREDENTIALS`): root in production, as every slurmstepd is.

use std::fs;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, UnixCredentials, recvmsg, setsockopt, sockopt,
};

use super::ask::{self, Book, Want};
use crate::scheduler::worker::Worker;
use crate::trusted_dir::{self, NO_ACCESS};

/// How many updates a second rings may cause in the long run, however often steps ring: a
/// sample reads the hardware and every step's cgroup and rewrites the ledger (and the
/// metrics file), and a job's owner decides how often their steps ring (an `sstat` loop in
/// every job). With the periodic updates (two a second at most), slurmd samples six times
/// a second at most.
pub(crate) const RING_RATE: f64 = 4.0;
/// How many rings in a row are answered at once (steps starting or ending together).
pub(crate) const RING_BURST: f64 = 8.0;
/// How long a step waits at an edge for slurmd to publish a fresh ledger, at most: an
/// update may wait a quarter of a second for the bucket ([`RING_RATE`]), and a sample is
/// microseconds of reads and a file written, so slurmd answers within that and
/// milliseconds unless it is gone, when the step goes on with what it has.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_millis(250 + 150);
/// How soon the sampler samples again while a step's ask waits for a reading taken after
/// it ([`Pace::awaits_newer_reading`]): a node controller scans every 100 ms, so its next
/// scan is read within this of being taken, well within [`ANSWER_WAIT`].
pub(crate) const RESAMPLE: Duration = Duration::from_millis(20);
const POLL: Duration = Duration::from_millis(2);
/// A ledger this young at a step's edge is its figure's end, to a few joules.
const FRESH: Duration = Duration::from_millis(10);

/// What a slurmstepd says when it rings: the socket is root's alone (slurmd's and the
/// slurmstepds'), and only slurmd's user is heard (`Ring::heard`), so no job's owner can
/// speak for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// Asks for a fresh ledger: a step's first read, or one outside Slurm's polls.
    Fresh,
    /// The last read of the step whose slurmstepd is `stepd`: its tasks are gone.
    Last {
        /// The pid of the step's slurmstepd.
        stepd: u32,
    },
}

impl Ring {
    fn encode(self) -> String {
        match self {
            Self::Fresh => "ring".to_string(),
            Self::Last { stepd } => format!("last {stepd}"),
        }
    }

    /// A datagram that says no more than a ring (an earlier slurmstepd's, or garbage)
    /// asks for a fresh ledger.
    fn decode(bytes: &[u8]) -> Self {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| t.strip_prefix("last "))
            .and_then(|pid| pid.parse().ok())
            .map_or(Self::Fresh, |stepd| Self::Last { stepd })
    }

    /// What a datagram from a sender of real uid `sender` (the kernel's word; `None`: it
    /// gave none) says to a slurmd running as `slurmd`: nothing unless it is slurmd's
    /// user, which every slurmstepd is (root; the tests' user in tests). Whatever else
    /// reached the socket (a process connected before it was made root's alone) says
    /// nothing: neither whose last read it is, nor that an update is wanted.
    fn heard(bytes: &[u8], sender: Option<u32>, slurmd: u32) -> Option<Self> {
        (sender == Some(slurmd)).then(|| Self::decode(bytes))
    }
}

/// Where the doorbell of the ledger at `ledger` is, for both ends: in a directory of its
/// own beside it (`energy-ledger.N.door/bell`, short: a socket's path is at most 107
/// bytes, and SlurmdSpoolDir may be long).
pub fn doorbell_path(ledger: &Path) -> PathBuf {
    ledger.with_extension("door").join("bell")
}

/// When slurmd last updated the ledger, whether a step asks for a new one, how many
/// updates rings may still cause at once, and which slurmstepds made their last read:
/// shared by slurmd's keeper, which decides at each sample whether to update
/// ([`Pace::take`]) and which steps it charges no more ([`Pace::take_last_reads`]), and its
/// doorbell, which wakes the sampler for an update no sooner than it may be taken
/// ([`Pace::ask`]).
#[derive(Debug, Default)]
pub(crate) struct Pace(Mutex<Paced>);

#[derive(Debug, Default)]
struct Paced {
    updated: Option<Instant>,
    /// When a step last asked for an update not yet taken: an update answers it only if
    /// its reading was taken after (one already under way when the ask came does not).
    wanted: Option<Instant>,
    /// When the reading of the last update was taken: a sample of a reading no newer (a
    /// controller's scan read again before its next) is no update a ring may cause.
    read: Option<Instant>,
    /// Updates rings caused that the bucket has not yet made up for (0: a full bucket).
    spent: f64,
    refilled: Option<Instant>,
    /// The slurmstepds whose last read rang since the last update (a few per step's end;
    /// at most one per ring, and rings are root's).
    last_reads: Vec<u32>,
}

impl Paced {
    fn refill(&mut self, now: Instant) {
        let since = self
            .refilled
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.spent = (self.spent - since * RING_RATE).max(0.0);
        self.refilled = Some(now);
    }

    /// Whether a ring may cause an update now.
    fn may_ring(&self) -> bool {
        self.spent <= RING_BURST - 1.0
    }
}

impl Pace {
    fn lock(&self) -> std::sync::MutexGuard<'_, Paced> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A step asks for an update at `now`: how long until the update that answers it may
    /// be taken (zero: at once).
    pub(crate) fn ask(&self, now: Instant) -> Duration {
        let mut paced = self.lock();
        paced.wanted = Some(now);
        paced.refill(now);
        let short = paced.spent - (RING_BURST - 1.0);
        Duration::from_secs_f64((short / RING_RATE).max(0.0))
    }

    /// The slurmstepd `stepd` made its last read.
    pub(crate) fn last_read(&self, stepd: u32) {
        self.lock().last_reads.push(stepd);
    }

    /// The slurmstepds whose last read rang before now, each once.
    pub(crate) fn take_last_reads(&self) -> Vec<u32> {
        std::mem::take(&mut self.lock().last_reads)
    }

    /// Whether a sample at `now`, of a reading taken at `read`, updates the ledger: the
    /// first does, one a step asked for does while the bucket allows, any does `interval`
    /// or more after the last update. When it does, it answers every ask before `read`;
    /// an ask that came while the sample was under way is still wanted, and the next
    /// sample (the ask woke the sampler) answers it.
    pub(crate) fn take(&self, now: Instant, read: Instant, interval: Duration) -> bool {
        let mut paced = self.lock();
        paced.refill(now);
        let periodic = paced
            .updated
            .is_none_or(|t| now.saturating_duration_since(t) >= interval);
        let newer = paced.read.is_none_or(|r| read > r);
        let rung = !periodic && newer && paced.wanted.is_some() && paced.may_ring();
        if rung {
            paced.spent += 1.0;
        }
        if periodic || rung {
            paced.updated = Some(now);
            paced.read = Some(read);
            if paced.wanted.is_some_and(|asked| asked <= read) {
                paced.wanted = None;
            }
        }
        periodic || rung
    }

    /// Whether a step's ask at most [`ANSWER_WAIT`] old still waits, at `now`, for a
    /// reading taken after it, which a ring may update with: the sampler then samples
    /// again within [`RESAMPLE`], not a period later. A source whose readings are dated
    /// when its hardware took them (a node controller's scans, ten a second) gives, just
    /// after an ask, a reading taken before it: at the next period the asking step has
    /// long stopped waiting, and its edge figure was the last update's brought forward at
    /// a power that may have fallen since (its job's end): +2.1% for a 40 s job at
    /// 200 W then 400 W, issue 53.
    pub(crate) fn awaits_newer_reading(&self, now: Instant) -> bool {
        let paced = self.lock();
        paced.wanted.is_some_and(|asked| {
            now.saturating_duration_since(asked) < ANSWER_WAIT
                && paced.read.is_none_or(|r| r < asked)
        }) && paced.may_ring()
    }
}

/// slurmd's side: a thread that calls `answer` at each ring, or once for the rings that
/// came until the update they ask for may be taken ([`Pace::ask`]).
pub(crate) struct Doorbell {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    worker: Option<Worker>,
}

impl Doorbell {
    /// Listens at `path` ([`doorbell_path`]) for rings and beside it ([`ask::ask_path`])
    /// for steps' questions, answered from `book`, in their directory that only slurmd's
    /// user can enter (created or checked: see the module's comment), replacing an earlier
    /// slurmd's sockets; `pace` says when an update may answer.
    pub(crate) fn open(
        path: &Path,
        pace: Arc<Pace>,
        book: Arc<Book>,
        answer: impl Fn() + Send + 'static,
    ) -> Result<Self, String> {
        let what = |e: std::io::Error| format!("cannot listen at {}: {e}", path.display());
        let dir = path
            .parent()
            .ok_or_else(|| what(std::io::ErrorKind::InvalidInput.into()))?;
        trusted_dir::create(dir, NO_ACCESS)
            .map_err(|e| format!("cannot listen at {}: {e}", path.display()))?;
        let asked = dir.join(ask::SOCKET_NAME);
        for old in [path, asked.as_path()] {
            match fs::remove_file(old) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(what(e)),
                _ => {}
            }
        }
        let socket = UnixDatagram::bind(path).map_err(what)?;
        setsockopt(&socket, sockopt::PassCred, &true).map_err(|e| what(e.into()))?;
        let questions = UnixListener::bind(&asked).map_err(what)?;
        questions.set_nonblocking(true).map_err(what)?;
        let slurmd = nix::unistd::getuid().as_raw();
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let worker = Worker::spawn("energy-doorbell", move |_| {
            let mut buf = [0u8; 32];
            let mut warned = false;
            // whether the datagram is a ring to act on; another's is said once in the log
            // (a process that got a socket connected to it may send as often as it likes)
            let mut heard = |(n, sender): (usize, Option<u32>), buf: &[u8]| {
                match Ring::heard(&buf[..n], sender, slurmd) {
                    // the update it wakes writes the file it waits for
                    Some(Ring::Last { stepd }) => pace.last_read(stepd),
                    Some(Ring::Fresh) => {}
                    None => {
                        if !std::mem::replace(&mut warned, true) {
                            log::warn!(
                                "the energy ledger's doorbell heard from {}, not slurmd's \
                                 user: ignored, as any more such",
                                sender.map_or("a sender without credentials".into(), |u| {
                                    format!("uid {u}")
                                })
                            );
                        }
                        return false;
                    }
                }
                true
            };
            let failed =
                |e: std::io::Error| log::error!("the energy ledger's doorbell failed: {e}");
            // when the update the rings and questions so far ask for may be taken
            let mut due: Option<Instant> = None;
            loop {
                let wait = due.map(|d| d.saturating_duration_since(Instant::now()));
                let (rung, questioned) = match readable(&socket, &questions, wait) {
                    Ok(ready) => ready,
                    Err(e) => return failed(e),
                };
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let mut wanted = false;
                if rung {
                    match receive(&socket, &mut buf) {
                        Ok(_) if stop.load(Ordering::SeqCst) => return,
                        Ok(got) => wanted |= heard(got, &buf),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) if is_timeout(&e) => {}
                        Err(e) => return failed(e),
                    }
                }
                if questioned {
                    // each connection is a root slurmstepd's (the directory is slurmd's
                    // user's alone), which wrote its question as it connected
                    while let Ok((stream, _)) = questions.accept() {
                        let Some(request) = ask::question(&stream, slurmd) else {
                            continue;
                        };
                        match request.want {
                            Want::Current => {}
                            Want::Refresh | Want::Fresh => wanted = true,
                            Want::Last { stepd } => {
                                pace.last_read(stepd);
                                wanted = true;
                            }
                        }
                        book.take(request, stream, Instant::now());
                    }
                }
                // until the update may be taken, the rings that come are answered by it
                // (each asks again: an update taken meanwhile answered only those before)
                if wanted {
                    due = Some(Instant::now() + pace.ask(Instant::now()));
                }
                if due.is_some_and(|d| d <= Instant::now()) {
                    due = None;
                    answer();
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

/// Waits until a ring or a question comes, or `wait` passes (`None`: until one comes);
/// returns which came.
fn readable(
    bell: &UnixDatagram,
    questions: &UnixListener,
    wait: Option<Duration>,
) -> std::io::Result<(bool, bool)> {
    let timeout = match wait {
        None => PollTimeout::NONE,
        Some(w) => {
            PollTimeout::try_from(w.as_millis().clamp(1, 60_000) as i32).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut fds = [
        PollFd::new(bell.as_fd(), PollFlags::POLLIN),
        PollFd::new(questions.as_fd(), PollFlags::POLLIN),
    ];
    match poll(&mut fds, timeout) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok((false, false)),
        Err(e) => return Err(e.into()),
    }
    let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
    Ok((ready(&fds[0]), ready(&fds[1])))
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // the thread sleeps in poll: a last datagram wakes it to see that it must stop
        self.stopping.store(true, Ordering::SeqCst);
        ring(&self.path, Ring::Fresh);
        drop(self.worker.take());
        let _ = fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = fs::remove_file(dir.join(ask::SOCKET_NAME));
        }
    }
}

/// One datagram into `buf`: its length, and the real uid of its sender as the kernel
/// says (`SCM_CREDENTIALS`, which `SO_PASSCRED` asks for whether the sender sends them or
/// not, and which only root can forge); `None` where none came.
fn receive(socket: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<(usize, Option<u32>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(UnixCredentials);
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )?;
    let sender = msg.cmsgs()?.find_map(|c| match c {
        ControlMessageOwned::ScmCredentials(c) => Some(c.uid()),
        _ => None,
    });
    Ok((msg.bytes, sender))
}

/// Whether a `recv` ended at its timeout (`EAGAIN`, which std reports as either kind).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Rings the doorbell at `path`; whether anyone listens there.
fn ring(path: &Path, ring: Ring) -> bool {
    UnixDatagram::unbound()
        .and_then(|s| {
            s.set_nonblocking(true)?;
            s.send_to(ring.encode().as_bytes(), path)
        })
        .is_ok()
}

/// Asks slurmd for a fresh ledger without waiting for it (a read made while tasks run, for
/// `sstat`: slurmd forwards that request to the slurmstepd and holds one of its RPC
/// threads until it is answered, so it must not wait on slurmd's own sample). The next
/// read finds the ledger sampled for it. False when nobody listens.
pub fn ring_without_waiting(doorbell: &Path) -> bool {
    ring(doorbell, Ring::Fresh)
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

/// Whether `ledger` was written within `age` before now (by the file's time).
pub(crate) fn written_within(ledger: &Path, age: Duration) -> bool {
    let since = SystemTime::now() - age;
    fs::metadata(ledger)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since)
}

/// slurmstepd's side: rings and waits until `ledger` is written anew (at most
/// `ANSWER_WAIT`). A last read always rings, and takes a ledger written after it: the
/// step is charged up to that update and no more.
pub fn freshen(doorbell: &Path, ledger: &Path, how: Ring) -> Freshness {
    // a file's time is the kernel's coarse clock (a few milliseconds behind ours): a
    // ledger written within FRESH before asking is fresh enough, and needs no ring
    let asked = SystemTime::now() - FRESH;
    // a last read takes no ledger written before its ring: slurmd writes each anew (a new
    // file renamed over the old), so one written since is another file or a later time
    let before = match how {
        Ring::Fresh if written_within(ledger, FRESH) => return Freshness::Recent,
        Ring::Fresh => None,
        Ring::Last { .. } => fs::metadata(ledger)
            .ok()
            .map(|m| (m.ino(), m.modified().ok())),
    };
    let written = || {
        fs::metadata(ledger).is_ok_and(|m| {
            m.modified().is_ok_and(|t| t >= asked)
                && before.is_none_or(|b| b != (m.ino(), m.modified().ok()))
        })
    };
    if !ring(doorbell, how) {
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
mod tests;
