//! The scheduler: which thread polls a source, and how often. Every thread the plugins start
//! is a [`Worker`] (see [`worker`]); a source that may block (a BMC, Variorum, the GPU
//! libraries) is polled only by a `Poller`, a worker that runs the one polling loop:
//! connect with backoff, log a failure once and its end once, run a round each period,
//! publish what it yields, and let a reader wait briefly for a fresh round. A source read in
//! microseconds is polled by the meter's own worker and in Slurm's calls
//! (`crate::meter`).
//!
//! A `Polling` says what connecting and a round are, and what the log says; a
//! `Poller` runs it in a [`Worker`], so stopping is as prompt and bounded as every other
//! thread's, including while it backs off. Readers see only what was published, through
//! a mutex that no hardware call ever holds. What a failed poll means for the loop is the
//! source's [`Failure`].

pub(crate) mod worker;

use std::ops::{Deref, DerefMut};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::source::Failure;
use worker::Worker;

/// What a [`Poller`] does, apart from the loop itself.
pub(crate) trait Polling: Send + 'static {
    /// What [`Polling::connect`] opens and every round goes through: a sensor's session,
    /// the vendor libraries.
    type Link;
    /// What a good round yields.
    type Output;
    /// What readers see; each good round's output is published into it.
    type Published: Default + Send + 'static;

    /// What a round does, for the log: "{DOING} failed: ...", "internal error while
    /// {DOING}".
    const DOING: &'static str;
    /// Whether a panic in `connect` or a round is contained (as a failed connect, or as
    /// a broken link) rather than ending the poller (which the worker logs; published
    /// figures then go stale, so readers report them unavailable).
    const CONTAIN_PANICS: bool;

    /// Connects. Runs in the poller; may block up to the hardware's own timeouts.
    fn connect(&mut self) -> Result<Self::Link, String>;

    /// One round's poll: a good one's output is published (and ends a failure episode);
    /// a [`Failure`] is logged once per failure episode, and the loop does what it says.
    /// Runs in the poller; may block up to the hardware's own timeouts.
    fn poll(&mut self, link: &mut Self::Link) -> Result<Self::Output, Failure>;

    /// Puts a good round's output where readers see it (under the readers' lock: no
    /// hardware call here).
    fn publish(output: Self::Output, published: &mut Self::Published);

    /// The error logged when connecting fails, once per failure episode; connecting is
    /// retried with backoff up to `max_backoff`.
    fn cannot_connect(why: &str, max_backoff: Duration) -> String;

    /// What is logged (info) on connecting.
    fn connected(_link: &Self::Link) -> Option<String> {
        None
    }

    /// What is logged (info) at the first good round after a failure.
    fn recovered(_output: &Self::Output) -> Option<String> {
        None
    }
}

/// How often a poller runs its rounds, and how it backs off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// Between rounds; also the first wait after a failed connect.
    pub period: Duration,
    /// Waits after failed connects double up to this.
    pub max_backoff: Duration,
}

/// The waits between failed connects: from one period, doubling up to the maximum, back
/// to one period after a good round (so a sensor that comes back and fails again is
/// retried soon).
#[derive(Debug, Clone, Copy)]
struct Backoff {
    timing: Timing,
    next: Duration,
}

impl Backoff {
    fn new(timing: Timing) -> Self {
        Self {
            timing,
            next: timing.period,
        }
    }

    /// The wait now, doubling the next one.
    fn take(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.timing.max_backoff);
        wait
    }

    fn reset(&mut self) {
        self.next = self.timing.period;
    }
}

/// What readers see: the published value and the rounds behind it.
struct Board<T> {
    published: T,
    /// Good rounds published.
    rounds: u64,
    /// When the round in progress started; `None` between rounds.
    busy_since: Option<Instant>,
    /// Why the current failure episode (connecting or rounds failing) began; `None` when
    /// not failing. An episode is logged once, when it begins, and its end once.
    failure: Option<String>,
}

impl<T> Board<T> {
    /// Begins a failure episode unless one is on; what `message` makes of `why` when it
    /// begins, to log once the board is unlocked (readers never wait on the log).
    #[must_use]
    fn fail(&mut self, why: String, message: impl FnOnce(&str) -> String) -> Option<String> {
        if self.failure.is_some() {
            return None;
        }
        let message = message(&why);
        self.failure = Some(why);
        Some(message)
    }
}

/// The board and the signal of each published round.
struct Shared<T> {
    board: Mutex<Board<T>>,
    round_done: Condvar,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Board<T>> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The published value, locked: the poller cannot publish while it is held, so hold it
/// briefly.
pub(crate) struct Latest<'a, T>(MutexGuard<'a, Board<T>>);

impl<T> Latest<'_, T> {
    /// Why nothing is being published, while connecting or rounds fail (the log says it
    /// in production; the tests ask).
    #[cfg(test)]
    pub(crate) fn failure(&self) -> Option<&str> {
        self.0.failure.as_deref()
    }
}

impl<T> Deref for Latest<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.published
    }
}

impl<T> DerefMut for Latest<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0.published
    }
}

/// A [`Polling`] running in its own thread; dropping it stops it (see [`Worker`]).
pub(crate) struct Poller<T> {
    shared: Arc<Shared<T>>,
    /// Held for its drop, which stops the thread; woken by [`Poller::fresh`].
    #[cfg_attr(not(any(feature = "gpu", test)), allow(dead_code))]
    worker: Worker,
}

impl<T: Default + Send + 'static> Poller<T> {
    /// Starts polling in a thread named `name` and returns at once: connecting happens in
    /// the poller.
    pub(crate) fn start<P: Polling<Published = T>>(
        name: &'static str,
        mut polling: P,
        timing: Timing,
    ) -> Result<Self, String> {
        let shared = Arc::new(Shared {
            board: Mutex::new(Board {
                published: T::default(),
                rounds: 0,
                busy_since: None,
                failure: None,
            }),
            round_done: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let worker = Worker::spawn(name, move |control| {
            run(&mut polling, &theirs, timing, |wait| {
                control.wait(Some(wait))
            })
        })?;
        Ok(Self { shared, worker })
    }

    /// The latest published value.
    pub(crate) fn latest(&self) -> Latest<'_, T> {
        Latest(self.shared.lock())
    }

    /// The value after a round that started after this call, when the poller is well
    /// (publishing, not stuck in a call) and delivers within `within`; else the latest.
    /// Only a round that publishes counts: while rounds fail this waits all of `within`.
    #[cfg(any(feature = "gpu", test))]
    pub(crate) fn fresh(&self, within: Duration) -> Latest<'_, T> {
        let called = Instant::now();
        let board = self.shared.lock();
        let wanted = match board.busy_since {
            None if board.rounds > 0 => board.rounds + 1,
            // a round in progress may have read some hardware before this call: the next
            Some(since) if called.saturating_duration_since(since) < within => board.rounds + 2,
            // stuck in a call, or not publishing yet: no waiting
            _ => return Latest(board),
        };
        self.worker.control().wake();
        let left = within.saturating_sub(called.elapsed());
        Latest(
            self.shared
                .round_done
                .wait_timeout_while(board, left, |b| b.rounds < wanted)
                .unwrap_or_else(PoisonError::into_inner)
                .0,
        )
    }
}

/// Runs `f`, turning a panic in it (third-party protocol or library code) into `on_panic`
/// when `contain`; otherwise the panic goes on to the worker, which logs it.
fn contained<R>(contain: bool, f: impl FnOnce() -> R, on_panic: impl FnOnce() -> R) -> R {
    if !contain {
        return f();
    }
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| on_panic())
}

/// The loop. `wait` sleeps up to the duration it is given (less when woken) and returns
/// false when the poller must stop: [`worker::Control::wait`] in the thread, a fake
/// clock in tests.
fn run<P: Polling>(
    polling: &mut P,
    shared: &Shared<P::Published>,
    timing: Timing,
    mut wait: impl FnMut(Duration) -> bool,
) {
    let mut link: Option<P::Link> = None;
    let mut backoff = Backoff::new(timing);
    loop {
        let current = match &mut link {
            Some(current) => current,
            None => {
                let connected = contained(
                    P::CONTAIN_PANICS,
                    || polling.connect(),
                    || Err("internal error while connecting".into()),
                );
                match connected {
                    Ok(new) => {
                        if let Some(message) = P::connected(&new) {
                            log::info!("{message}");
                        }
                        link.insert(new)
                    }
                    Err(why) => {
                        let began = shared
                            .lock()
                            .fail(why, |why| P::cannot_connect(why, timing.max_backoff));
                        if let Some(message) = began {
                            log::error!("{message}");
                        }
                        if !wait(backoff.take()) {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        shared.lock().busy_since = Some(Instant::now());
        let outcome = contained(
            P::CONTAIN_PANICS,
            || polling.poll(current),
            || {
                Err(Failure::Reconnect(format!(
                    "internal error while {}",
                    P::DOING
                )))
            },
        );
        // what to log, once the board is unlocked
        let (published, note) = {
            let mut board = shared.lock();
            board.busy_since = None;
            match outcome {
                Ok(output) => {
                    let note = match board.failure.take() {
                        Some(_) => P::recovered(&output).map(|m| (log::Level::Info, m)),
                        None => None,
                    };
                    backoff.reset();
                    P::publish(output, &mut board.published);
                    board.rounds += 1;
                    (true, note)
                }
                Err(Failure::Retry(why)) => {
                    let began = board.fail(why, |why| {
                        format!("{} failed: {why}; skipping such readings", P::DOING)
                    });
                    (false, began.map(|m| (log::Level::Error, m)))
                }
                Err(Failure::Reconnect(why)) => {
                    let began = board.fail(why, |why| {
                        format!("{} failed: {why}; reconnecting", P::DOING)
                    });
                    link = None;
                    (false, began.map(|m| (log::Level::Error, m)))
                }
            }
        };
        if published {
            shared.round_done.notify_all();
        }
        if let Some((level, message)) = note {
            log::log!(level, "{message}");
        }
        if !wait(timing.period) {
            return;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
