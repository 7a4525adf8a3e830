//! The meter: the node's figure, kept by polling its source often enough.
//!
//! Slurm may poll far less often than a counter wraps (AcctGatherNodeFreq=300 on an AMD node
//! wraps in ~3 min; JobAcctGatherFrequency=0 polls a step only at its end), so slurmd's
//! sample loop (`runtime::node`) polls the source at the period its plugin opened it with
//! ([`Opened::sample_period`]) besides Slurm's own calls, so each figure Slurm gets is
//! current. All polls go through one mutex; a poll is a few `pread`s, so no Slurm call
//! waits on anything slow.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::accounting::Accounting;
use crate::plugin::Opened;
use crate::source::{Reading, Source, stale_after};

/// A source of readings, as the meter holds it.
type Readings = Box<dyn Source>;

/// A source and its accounting: the node's figure, as the plugin holds it. A clone is the
/// same meter (the sample loop's thread holds one).
#[derive(Clone)]
pub(crate) struct Meter {
    shared: Arc<Shared>,
}

struct Shared {
    kept: Mutex<Kept>,
    period: Duration,
}

/// What the meter keeps under its lock.
struct Kept {
    source: Readings,
    accounting: Accounting,
    /// When the source was last polled, successfully or not.
    sampled_at: Instant,
    /// A failure episode is logged once, not at every poll.
    failing: bool,
}

impl Meter {
    /// Logs what will be measured and takes the first reading now.
    pub(crate) fn new(opened: Opened<impl Source>) -> Self {
        let Opened {
            source,
            sample_period: period,
        } = opened;
        log::info!("measuring {}", source.describe());
        let shared = Arc::new(Shared {
            kept: Mutex::new(Kept {
                source: Box::new(source),
                accounting: Accounting::new(SystemTime::now()),
                sampled_at: Instant::now(),
                failing: false,
            }),
            period,
        });
        shared.sample();
        Self { shared }
    }

    /// What it polls, in one line ([`Source::describe`]).
    pub(crate) fn describe(&self) -> String {
        self.shared.lock().source.describe()
    }

    /// How often the source is to be polled between Slurm's calls.
    pub(crate) fn period(&self) -> Duration {
        self.shared.period
    }

    /// Readings older than this are unavailable.
    pub(crate) fn stale_after(&self) -> Duration {
        stale_after(self.shared.period)
    }

    /// Polls the source now and returns the accounting.
    pub(crate) fn refresh(&self) -> Accounting {
        self.shared.sample()
    }

    /// Polls the source now: the accounting, and this reading (its devices and hardware
    /// counts beside the energy the accounting took), for the sample loop's keeper.
    pub(crate) fn sample(&self) -> (Accounting, Reading) {
        self.shared.sample_reading()
    }

    /// The accounting, polling the source only if it was not within one period.
    pub(crate) fn recent(&self) -> Accounting {
        let kept = self.shared.lock();
        if kept.sampled_at.elapsed() <= self.shared.period {
            return kept.accounting;
        }
        drop(kept);
        self.shared.sample()
    }

    /// The accounting as of the latest reading.
    pub(crate) fn snapshot(&self) -> Accounting {
        self.shared.lock().accounting
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sample(&self) -> Accounting {
        self.sample_reading().0
    }

    /// Polls the source; its accounting, and this reading.
    fn sample_reading(&self) -> (Accounting, Reading) {
        let mut kept = self.lock();
        let (now, wall) = (Instant::now(), SystemTime::now());
        kept.sampled_at = now;
        let reading = kept.source.poll(now);
        if reading.complete {
            if kept.failing {
                log::info!("energy readings are back");
                kept.failing = false;
            }
            for problem in &reading.problems {
                log::warn!("{problem}");
            }
        } else if !kept.failing && !reading.problems.is_empty() {
            log::error!(
                "reading energy failed: {}; reporting the last good reading until it is older \
                 than {} s, then no energy (NO_VAL)",
                reading.problems.join("; "),
                stale_after(self.period).as_secs()
            );
            kept.failing = true;
        }
        let at = taken_at(&reading, now, Instant::now(), self.period);
        kept.accounting.record(&reading, at, wall_at(wall, now, at));
        (kept.accounting, reading)
    }
}

/// When `reading`, polled from `polled` to `returned`, was taken: its hardware's stamp
/// where it has one no older than a sample `period` (a stamp older than that is a
/// controller that stopped scanning, whose value is taken as of the poll), and never after
/// the poll returned; else the poll's start. A value the hardware took late, or a poll
/// that stalled, would otherwise date energy at another time than it was used in.
fn taken_at(reading: &Reading, polled: Instant, returned: Instant, period: Duration) -> Instant {
    reading
        .taken_at
        .filter(|t| polled.saturating_duration_since(*t) <= period)
        .map_or(polled, |t| t.min(returned))
}

/// The wall clock at `at`, from a reading of it (`wall`) at `then`: one moment on both
/// clocks, however long the poll between took.
fn wall_at(wall: SystemTime, then: Instant, at: Instant) -> SystemTime {
    let moved = match at.checked_duration_since(then) {
        Some(later) => wall.checked_add(later),
        None => wall.checked_sub(then.duration_since(at)),
    };
    moved.unwrap_or(wall)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll that stalls for 200 ms before it reads its counter, at 100 W, and 300 ms
    /// after.
    struct Stalling {
        started: Instant,
    }

    impl Source for Stalling {
        fn describe(&self) -> String {
            "stalling".into()
        }

        fn poll(&mut self, _now: Instant) -> Reading {
            std::thread::sleep(Duration::from_millis(200));
            let read = Instant::now();
            let energy_uj = (read.duration_since(self.started).as_secs_f64() * 100e6) as u64;
            std::thread::sleep(Duration::from_millis(300));
            Reading {
                energy_uj,
                complete: true,
                taken_at: Some(read),
                ..Reading::default()
            }
        }
    }

    /// The point is dated when the counter was read, on both clocks: not when the stalled
    /// poll returned, which would state a shorter time for the energy between readings.
    #[test]
    fn a_reading_is_dated_when_its_hardware_took_it_on_both_clocks() {
        let started = Instant::now();
        let meter = Meter::new(Opened {
            source: Stalling { started },
            sample_period: Duration::from_secs(1),
        });
        let (wall0, at0) = (SystemTime::now(), Instant::now());
        let point = meter.refresh().fresh(Instant::now(), Duration::MAX);
        let returned = Instant::now();
        let point = point.expect("a point");
        let taken = point.at.duration_since(started).as_secs_f64();
        let energy_secs = point.energy_uj as f64 / 100e6;
        assert!(
            (taken - energy_secs).abs() < 0.005,
            "{taken} s, {energy_secs} s"
        );
        assert!(returned.duration_since(point.at) >= Duration::from_millis(300));
        // the wall clock at the same moment
        let wall_secs = point
            .wall
            .duration_since(wall0)
            .map(|d| d.as_secs_f64())
            .unwrap_or_else(|e| -e.duration().as_secs_f64());
        let at_secs = point.at.duration_since(at0).as_secs_f64();
        assert!(
            (wall_secs - at_secs).abs() < 0.005,
            "{wall_secs} s, {at_secs} s"
        );
    }

    #[test]
    fn a_stamp_is_taken_within_a_period_and_never_after_the_poll() {
        let polled = Instant::now();
        let returned = polled + Duration::from_millis(400);
        let period = Duration::from_secs(1);
        let at = |taken: Option<Instant>| {
            taken_at(
                &Reading {
                    taken_at: taken,
                    ..Reading::default()
                },
                polled,
                returned,
                period,
            )
        };
        let before = polled.checked_sub(Duration::from_millis(300));
        assert_eq!(at(before), before.expect("instant"));
        // a controller that stopped scanning: its value as of the poll
        let stopped = polled.checked_sub(Duration::from_secs(2));
        assert_eq!(at(stopped), polled);
        assert_eq!(at(Some(returned + Duration::from_secs(1))), returned);
        assert_eq!(at(None), polled);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            wall_at(wall, polled, polled + Duration::from_millis(250)),
            wall + Duration::from_millis(250)
        );
        if let Some(before) = before {
            assert_eq!(
                wall_at(wall, polled, before),
                wall - Duration::from_millis(300)
            );
        }
    }
}
