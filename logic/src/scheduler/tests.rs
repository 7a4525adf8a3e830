//! The loop over a scripted [`Polling`] and a fake clock (no thread, no sleeping): the
//! waits it asks for, what it logs, when it connects; then the thread itself, for a prompt
//! stop and a fresh round.

use std::collections::VecDeque;
use std::sync::{Mutex, Once};

use super::*;

/// What the scripted `connect` does next; `Succeed` once the script is used up.
enum Connect {
    Succeed,
    Fail(&'static str),
    Panic,
}

/// What the scripted round does next; `Publish` of the round's number once used up.
enum Step {
    Be(Result<u32, Failure>),
    Panic,
}

#[derive(Default)]
struct Script {
    connects: VecDeque<Connect>,
    steps: VecDeque<Step>,
    /// Links opened so far (each link is its number).
    links: u32,
    /// Rounds run, and through which link.
    rounds: Vec<u32>,
}

impl Polling for Script {
    type Link = u32;
    type Output = u32;
    type Published = Vec<u32>;
    const DOING: &'static str = "reading the fake";
    const CONTAIN_PANICS: bool = true;

    fn connect(&mut self) -> Result<u32, String> {
        match self.connects.pop_front() {
            Some(Connect::Fail(why)) => Err(why.into()),
            Some(Connect::Panic) => panic!("the fake panics while connecting"),
            Some(Connect::Succeed) | None => {
                self.links += 1;
                Ok(self.links)
            }
        }
    }

    fn poll(&mut self, link: &mut u32) -> Result<u32, Failure> {
        self.rounds.push(*link);
        match self.steps.pop_front() {
            Some(Step::Be(outcome)) => outcome,
            Some(Step::Panic) => panic!("the fake panics in a round"),
            None => Ok(self.rounds.len() as u32),
        }
    }

    fn publish(output: u32, published: &mut Vec<u32>) {
        published.push(output);
    }

    fn cannot_connect(why: &str, max_backoff: Duration) -> String {
        format!("cannot connect to the fake: {why}; up to {max_backoff:?}")
    }

    fn connected(link: &u32) -> Option<String> {
        Some(format!("connected: link {link}"))
    }

    fn recovered(output: &u32) -> Option<String> {
        Some(format!("the fake is back ({output})"))
    }
}

const TIMING: Timing = Timing {
    period: Duration::from_secs(1),
    max_backoff: Duration::from_secs(8),
};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Runs the loop in this thread until it has asked for `waits` waits; the waits asked
/// for, and the board.
fn run_for(script: &mut Script, waits: usize) -> (Vec<Duration>, Board<Vec<u32>>) {
    let shared = Shared {
        board: Mutex::new(Board {
            published: Vec::new(),
            rounds: 0,
            busy_since: None,
            failure: None,
        }),
        round_done: Condvar::new(),
    };
    let mut asked = Vec::new();
    run(script, &shared, TIMING, |wait| {
        asked.push(wait);
        asked.len() < waits
    });
    let board = shared.board.into_inner().expect("not poisoned");
    (asked, board)
}

/// What this test's thread logged, as "LEVEL message" (the scheduler's, the ledger's, the
/// runtime's and the configuration's tests).
pub(crate) fn logged() -> Vec<String> {
    static LOGS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, record: &log::Record) {
            // other tests of the crate log too, in threads of their own
            if let Some(name) = std::thread::current().name()
                && [
                    "scheduler::tests::",
                    "ledger::tests::",
                    "runtime::tests::",
                    "config::tests::",
                ]
                .iter()
                .any(|prefix| name.starts_with(prefix))
            {
                LOGS.lock().unwrap_or_else(PoisonError::into_inner).push((
                    name.to_string(),
                    format!("{} {}", record.level(), record.args()),
                ));
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture;
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if log::set_logger(&CAPTURE).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
    });
    let me = std::thread::current().name().map(str::to_string);
    LOGS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(name, _)| Some(name) == me.as_ref())
        .map(|(_, line)| line.clone())
        .collect()
}

#[test]
fn backoff_doubles_from_the_period_up_to_its_cap() {
    let mut b = Backoff::new(TIMING);
    let waits: Vec<_> = (0..6).map(|_| b.take()).collect();
    assert_eq!(
        waits,
        [secs(1), secs(2), secs(4), secs(8), secs(8), secs(8)]
    );
    b.reset();
    assert_eq!(b.take(), secs(1));
}

#[test]
fn connecting_backs_off_and_rounds_follow_the_period() {
    let mut script = Script {
        connects: (0..5).map(|_| Connect::Fail("refused")).collect(),
        ..Script::default()
    };
    let (waits, board) = run_for(&mut script, 8);
    // five failed connects, then rounds every period
    assert_eq!(
        waits,
        [
            secs(1),
            secs(2),
            secs(4),
            secs(8),
            secs(8),
            secs(1),
            secs(1),
            secs(1)
        ]
    );
    assert_eq!(script.links, 1);
    assert_eq!(board.published, [1, 2, 3]);
    assert_eq!(board.rounds, 3);
    assert_eq!(board.failure, None);
    assert_eq!(board.busy_since, None);
}

#[test]
fn a_failure_episode_is_logged_once_and_its_end_once() {
    // `logged` installs the capture before anything is logged
    assert!(logged().is_empty());
    let mut script = Script {
        connects: (0..3).map(|_| Connect::Fail("refused")).collect(),
        steps: VecDeque::from([
            Step::Be(Ok(10)),
            Step::Be(Err(Failure::Retry("all zero".into()))),
            Step::Be(Err(Failure::Retry("all zero".into()))),
            Step::Be(Err(Failure::Reconnect("timed out".into()))),
            Step::Be(Ok(11)),
        ]),
        ..Script::default()
    };
    run_for(&mut script, 9);
    assert_eq!(
        logged(),
        [
            "ERROR cannot connect to the fake: refused; up to 8s",
            "INFO connected: link 1",
            "INFO the fake is back (10)",
            // the first failure of the episode, not the next ones, nor the reconnect
            "ERROR reading the fake failed: all zero; skipping such readings",
            "INFO connected: link 2",
            "INFO the fake is back (11)",
        ]
    );
}

#[test]
fn a_broken_link_is_reconnected_and_a_skipped_round_keeps_it() {
    let mut script = Script {
        steps: VecDeque::from([
            Step::Be(Err(Failure::Retry("all zero".into()))),
            Step::Be(Err(Failure::Reconnect("timed out".into()))),
            Step::Be(Ok(7)),
        ]),
        ..Script::default()
    };
    let (waits, board) = run_for(&mut script, 4);
    // the reconnect is at once after the period, not backed off
    assert_eq!(waits, [secs(1); 4]);
    assert_eq!(script.rounds, [1, 1, 2, 2]);
    assert_eq!(board.published, [7, 4]);
}

#[test]
fn backoff_starts_again_from_the_period_after_a_good_round() {
    let mut script = Script {
        connects: VecDeque::from([
            Connect::Fail("refused"),
            Connect::Fail("refused"),
            Connect::Fail("refused"),
            Connect::Succeed,
            Connect::Fail("refused"),
        ]),
        steps: VecDeque::from([
            Step::Be(Ok(1)),
            Step::Be(Err(Failure::Reconnect("timed out".into()))),
        ]),
        ..Script::default()
    };
    let (waits, _) = run_for(&mut script, 9);
    assert_eq!(
        waits,
        [
            secs(1), // three failed connects
            secs(2),
            secs(4),
            secs(1), // the good round
            secs(1), // the broken link
            secs(1), // connecting fails again: from one period
            secs(1), // connected
            secs(1),
            secs(1)
        ]
    );
}

#[test]
fn panics_are_contained_as_a_failed_connect_and_a_broken_link() {
    assert!(logged().is_empty());
    let mut script = Script {
        connects: VecDeque::from([Connect::Panic]),
        steps: VecDeque::from([Step::Be(Ok(1)), Step::Panic]),
        ..Script::default()
    };
    let (waits, board) = run_for(&mut script, 5);
    assert_eq!(waits, [secs(1); 5]);
    assert_eq!(script.links, 2, "reconnected after the panicking round");
    assert_eq!(board.published, [1, 3, 4]);
    let logs = logged();
    assert_eq!(
        logs[0],
        "ERROR cannot connect to the fake: internal error while connecting; up to 8s"
    );
    assert!(
        logs.contains(
            &"ERROR reading the fake failed: internal error while reading the fake; reconnecting"
                .to_string()
        ),
        "{logs:?}"
    );
}

/// A link that never comes, polled in its own thread.
struct NeverConnects;

impl Polling for NeverConnects {
    type Link = ();
    type Output = ();
    type Published = ();
    const DOING: &'static str = "reading nothing";
    const CONTAIN_PANICS: bool = true;
    fn connect(&mut self) -> Result<(), String> {
        Err("nothing there".into())
    }
    fn poll(&mut self, _: &mut ()) -> Result<(), Failure> {
        Ok(())
    }
    fn publish(_: (), _: &mut ()) {}
    fn cannot_connect(why: &str, _: Duration) -> String {
        why.into()
    }
}

/// Waits up to 5 s for `done`.
fn until(done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() && t0.elapsed() < secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Drops `poller`, which must stop at once however long it would sleep.
fn stops_at_once<T>(poller: Poller<T>) {
    let t0 = Instant::now();
    drop(poller);
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_poller_backing_off_stops_at_once() {
    let poller = Poller::start(
        "test-backoff",
        NeverConnects,
        Timing {
            period: secs(30),
            max_backoff: secs(60),
        },
    )
    .expect("start");
    until(|| poller.latest().failure().is_some());
    assert_eq!(poller.latest().failure(), Some("nothing there"));
    stops_at_once(poller);
}

#[test]
fn a_reader_gets_a_round_started_after_it_asked() {
    // rounds only when woken: the period is far longer than the test
    let poller = Poller::start(
        "test-fresh",
        Script::default(),
        Timing {
            period: secs(600),
            max_backoff: secs(600),
        },
    )
    .expect("start");
    until(|| poller.latest().0.rounds > 0);
    assert_eq!(*poller.latest(), [1]);
    let fresh = poller.fresh(secs(5));
    assert_eq!(*fresh, [1, 2]);
    drop(fresh);
    stops_at_once(poller);
}
