//! A step's question to slurmd and slurmd's answer: one definition for both ends.
//!
//! A slurmstepd asks for its own step's figure ([`Request`]) on the ledger's doorbell and
//! slurmd answers from its memory ([`Answer`], a lookup in [`Book`]): a step's read never
//! parses the node's other jobs and never waits for a file. The question travels as one
//! line on a stream socket beside the doorbell ([`ask_path`]), in the doorbell's directory
//! that only slurmd's user may enter; the answer comes back on the same connection, so no
//! other process can answer in slurmd's name, and slurmd hears only its own user (the
//! kernel's `SO_PEERCRED`). No other step's figure is ever sent: the answer holds the asking
//! step's account only, and the node's, which every step of the node may read.
//!
//! The question names the exchange's version it is asked in (`super`'s "Versions"); a
//! slurmd that does not listen there (one of version 1, or one starting again) is known at
//! once, and the step rings the doorbell and reads the ledger file instead.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr, connect, getsockopt, recv, send, sockopt,
};

use super::{MIN_PROTOCOL_VERSION, ONE_BACK_PROTOCOL_VERSION, PROTOCOL_VERSION};
use crate::attribution::{StepId, StepKey};
use crate::ledger::{Account, Ledger, Part};

/// What a step asks: its step's figure (`None` while its slurmstepd has no title yet, when
/// it learns the node's figures only), and how fresh it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    /// The exchange's version it is asked in: 2 (unnamed) up to [`PROTOCOL_VERSION`].
    pub version: u16,
    pub step: Option<StepKey>,
    pub want: Want,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// The figure as of slurmd's last update (Slurm's periodic polls).
    Current,
    /// The figure now, and an update soon: the next read finds it (an `sstat` while tasks
    /// run, which must not wait on slurmd's sample).
    Refresh,
    /// A figure from an update taken after the question (a step's first read).
    Fresh,
    /// As `Fresh`, and this is the last read of the step whose slurmstepd is `stepd`: it is
    /// charged up to the update that answers, then no more.
    Last { stepd: u32 },
}

impl Want {
    /// Whether the answer waits for an update taken after the question.
    pub(crate) fn waits(self) -> bool {
        matches!(self, Self::Fresh | Self::Last { .. })
    }
}

/// The prefix of a question; a datagram without it is a ring of version 1.
const ASK: &str = "ask";
/// The first version whose questions name it (version 2's say `ask ` alone).
const NAMED_FROM: u16 = 3;

impl Request {
    /// This release's question for `step`.
    pub(crate) fn new(step: Option<StepKey>, want: Want) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            step,
            want,
        }
    }

    /// `ask<version> <job>.<step>|- current|refresh|fresh|last <pid>` (version 2: `ask`
    /// alone): a few dozen bytes of ASCII.
    pub(crate) fn encode(self) -> String {
        let step = self
            .step
            .map_or("-".to_string(), |k| format!("{}.{}", k.job, k.step.0));
        let want = match self.want {
            Want::Current => "current".to_string(),
            Want::Refresh => "refresh".to_string(),
            Want::Fresh => "fresh".to_string(),
            Want::Last { stepd } => format!("last {stepd}"),
        };
        let version = match self.version {
            v if v >= NAMED_FROM => v.to_string(),
            _ => String::new(),
        };
        format!("{ASK}{version} {step} {want}")
    }

    /// A question of a version this slurmd serves ([`MIN_PROTOCOL_VERSION`] to
    /// [`PROTOCOL_VERSION`]), or `None` for anything else (a ring of version 1, a version
    /// outside the window, garbage).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?.strip_prefix(ASK)?;
        let (named, text) = text.split_once(' ')?;
        let version = match named {
            "" => 2,
            named => named
                .parse()
                .ok()
                .filter(|v| (NAMED_FROM..=PROTOCOL_VERSION).contains(v))?,
        };
        if version < MIN_PROTOCOL_VERSION {
            return None;
        }
        let mut words = text.split(' ');
        let step = match words.next()? {
            "-" => None,
            key => {
                let (job, step) = key.split_once('.')?;
                Some(StepKey {
                    job: job.parse().ok()?,
                    step: StepId(step.parse().ok()?),
                })
            }
        };
        let want = match (words.next()?, words.next()) {
            ("current", None) => Want::Current,
            ("refresh", None) => Want::Refresh,
            ("fresh", None) => Want::Fresh,
            ("last", Some(pid)) => Want::Last {
                stepd: pid.parse().ok()?,
            },
            _ => return None,
        };
        words.next().is_none().then_some(Self {
            version,
            step,
            want,
        })
    }

    /// The same question in the version before this release's, if it is not in it yet:
    /// what a slurmd of that version reads (version 1 took no questions).
    pub(crate) fn one_back(self) -> Option<Self> {
        (self.version > ONE_BACK_PROTOCOL_VERSION).then_some(Self {
            version: ONE_BACK_PROTOCOL_VERSION,
            ..self
        })
    }
}

/// slurmd's answer: what a step's figure needs of the ledger, its own step's account only.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Answer {
    /// The ledger's epoch ([`Ledger::epoch`]): another means slurmd began a new ledger.
    pub epoch: u64,
    /// Unix time of the update it comes from.
    pub sampled_at: f64,
    /// [`Ledger::gives_shares`].
    pub shares: Option<bool>,
    pub node: Account,
    pub parts: Vec<Part>,
    /// The asking step's account, if the ledger has one.
    pub step: Option<Account>,
}

impl Answer {
    /// The answer `ledger` gives the step `step`.
    pub(crate) fn from_ledger(ledger: &Ledger, step: Option<StepKey>) -> Self {
        Self {
            epoch: ledger.epoch(),
            sampled_at: ledger.sampled_at(),
            shares: ledger.gives_shares(),
            node: ledger.node(),
            parts: ledger.parts().to_vec(),
            step: step.and_then(|k| ledger.step(k.job, k.step)),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// Why a question got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// Nobody listens (a slurmd of version 1, or one starting again): known at once.
    Refused,
    /// slurmd heard the question and closed without an answer: one of another version
    /// that cannot read it, or one that has no update yet (before its first sample).
    Dropped,
    /// No answer within the wait (slurmd starved or hung).
    TimedOut,
}

/// The largest answer: a ledger's header and a few dozen parts.
const MAX_ANSWER: usize = 16 * 1024;

/// Where slurmd listens for questions, beside the doorbell of the ledger at `ledger`, in
/// the doorbell's directory that only slurmd's user may enter.
pub(crate) fn ask_path(ledger: &Path) -> PathBuf {
    ledger.with_extension("door").join(SOCKET_NAME)
}

/// The name of the socket steps ask on, in the doorbell's directory.
pub(crate) const SOCKET_NAME: &str = "ask";

/// slurmstepd's side: asks slurmd at `socket` ([`ask_path`]) and waits for the answer at
/// most `wait`. Never waits to connect: a listener whose queue is full is as good as none.
pub(crate) fn ask(socket: &Path, request: Request, wait: Duration) -> Result<Answer, Unanswered> {
    let refused = |_| Unanswered::Refused;
    let fd = nix::sys::socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(refused)?;
    connect(fd.as_raw_fd(), &UnixAddr::new(socket).map_err(refused)?).map_err(refused)?;
    let stream = UnixStream::from(fd);
    let deadline = Instant::now() + wait;
    let line = format!("{}\n", request.encode());
    // a question is a few dozen bytes, which an empty socket's buffer takes at once
    send_all(&stream, line.as_bytes(), MsgFlags::MSG_DONTWAIT).map_err(refused)?;
    // the socket stays non-blocking: each wait is a poll bounded by what is left
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match recv(stream.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            // slurmd closes once it answered; closed without an answer, it dropped it
            Ok(0) => return Answer::decode(&answer).ok_or(Unanswered::Dropped),
            Ok(n) if answer.len() + n <= MAX_ANSWER => answer.extend_from_slice(&buf[..n]),
            Ok(_) => return Err(Unanswered::Dropped),
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || !readable_within(&stream, left) {
                    return Err(Unanswered::TimedOut);
                }
            }
            Err(_) => return Err(Unanswered::Dropped),
        }
    }
}

/// Whether `stream` has something to read (or is closed) within `wait`.
fn readable_within(stream: &UnixStream, wait: Duration) -> bool {
    // rounded up: a poll never ends before the deadline it serves
    let millis = i32::try_from(wait.as_micros().div_ceil(1000).max(1)).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, timeout) {
            Ok(n) => return n > 0,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// slurmd's side: the question on a connection just accepted, if its peer is slurmd's
/// user `slurmd` (by the kernel's credentials) and says one in time. A slurmstepd writes
/// it whole as it connects, so the wait is short: a peer that says nothing in time is
/// dropped rather than holding the doorbell's thread.
pub(crate) fn question(stream: &UnixStream, slurmd: u32) -> Option<Request> {
    let peer = getsockopt(stream, sockopt::PeerCredentials).ok()?;
    if peer.uid() != slurmd {
        return None;
    }
    // the question is there already, mostly: a wait only where it is not
    let mut line = Vec::new();
    let mut buf = [0u8; 64];
    let deadline = Instant::now() + QUESTION_WAIT;
    while !line.contains(&b'\n') && line.len() < MAX_QUESTION {
        match recv(stream.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&buf[..n]),
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || !readable_within(stream, left) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
    let end = line.iter().position(|&b| b == b'\n')?;
    Request::decode(&line[..end])
}

/// How long slurmd waits for a connected slurmstepd to say its question.
const QUESTION_WAIT: Duration = Duration::from_millis(20);
/// The longest question (`ask65535 4294967295.4294967295 last 4294967295`, with room).
const MAX_QUESTION: usize = 128;

/// How long a question waits for an update at most: longer than any asker waits
/// (`doorbell::ANSWER_WAIT`), after which nobody reads the answer.
const KEPT_WAITING: Duration = Duration::from_secs(2);

/// slurmd's side: what it answers from, kept by the ledger's keeper at each update, and
/// the questions that wait for the next one.
#[derive(Debug, Default)]
pub(crate) struct Book(Mutex<Booked>);

#[derive(Debug, Default)]
struct Booked {
    /// The last update's answer without a step's account.
    header: Answer,
    /// Whether an update was ever booked: until then a question waits for one.
    booked: bool,
    /// Each step's account, in key order (a search, not a hash map: kept at every update,
    /// it is built from the ledger's own order in a few µs at 256 jobs).
    steps: Vec<(StepKey, Account)>,
    /// Questions that wait for an update taken after they came, with when they came.
    waiting: Vec<(Request, UnixStream, Instant)>,
}

impl Booked {
    fn answer(&self, request: Request) -> Answer {
        Answer {
            step: request.step.and_then(|k| {
                let found = self.steps.binary_search_by_key(&k, |(key, _)| *key);
                found.ok().map(|at| self.steps[at].1)
            }),
            ..self.header.clone()
        }
    }
}

impl Book {
    fn lock(&self) -> std::sync::MutexGuard<'_, Booked> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A question heard on the doorbell at `now`, with the socket to answer on: answered
    /// at once unless it waits for an update ([`Want::waits`]), when [`Book::update`]
    /// answers it. Before slurmd's first update there is nothing to answer at once: the
    /// connection is closed, and the step reads the file as it did before the questions.
    pub(crate) fn take(&self, request: Request, reply: UnixStream, now: Instant) {
        let mut booked = self.lock();
        // a slurmd whose meter stopped keeps no question longer than its asker waits
        booked
            .waiting
            .retain(|(_, _, came)| now.saturating_duration_since(*came) < KEPT_WAITING);
        if request.want.waits() {
            booked.waiting.push((request, reply, now));
        } else if booked.booked {
            send_answer(&reply, &booked.answer(request));
        }
    }

    /// slurmd's keeper updated `ledger` from a reading taken at `taken`: the book is this
    /// update's, and the questions that came before the reading are answered.
    pub(crate) fn update(&self, ledger: &Ledger, taken: Instant) {
        let mut steps = Vec::new();
        for job in ledger.jobs() {
            steps.extend(
                job.steps()
                    .map(|(step, a)| (StepKey { job: job.id, step }, a)),
            );
        }
        // in order already (the ledger's maps are); a sorted run is checked in one pass
        steps.sort_unstable_by_key(|(key, _)| *key);
        let mut booked = self.lock();
        booked.header = Answer::from_ledger(ledger, None);
        booked.booked = true;
        booked.steps = steps;
        let waiting = std::mem::take(&mut booked.waiting);
        for (request, reply, came) in waiting {
            if came <= taken {
                send_answer(&reply, &booked.answer(request));
            } else {
                booked.waiting.push((request, reply, came));
            }
        }
    }

    /// How many questions wait for an update.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// Sends `answer` on `reply` without waiting (an answer is a few hundred bytes, which the
/// socket's buffer holds), then closes it: an asker that gave up goes on without it.
fn send_answer(reply: &UnixStream, answer: &Answer) {
    let _ = send_all(reply, &answer.encode(), MsgFlags::MSG_DONTWAIT);
}

/// Writes `bytes` whole, never raising `SIGPIPE` (slurmd's and slurmstepd's disposition of
/// it is Slurm's, not ours: a peer gone must not end the daemon).
fn send_all(stream: &UnixStream, mut bytes: &[u8], flags: MsgFlags) -> nix::Result<()> {
    while !bytes.is_empty() {
        match send(stream.as_raw_fd(), bytes, flags | MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
