//! A source, its accounting, and the thread that samples it often enough.
//!
//! Slurm may poll far less often than a counter wraps (AcctGatherNodeFreq=300 on an AMD node
//! wraps in ~3 min; JobAcctGatherFrequency=0 polls a step only at its end), so every process
//! that measures runs a sampler at the source's `sample_period`. Slurm's own calls also read
//! the hardware, so each figure Slurm gets is current. All reads go through one mutex; a read
//! is a few `pread`s, so no Slurm call waits on anything slow.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::accounting::Accounting;
use crate::source::{EnergyReader, Reading, stale_after};
use crate::worker::{Control, Worker};

pub(crate) struct Meter<S: EnergyReader> {
    shared: Arc<Shared<S>>,
    sampler: Option<Worker>,
}

struct Shared<S> {
    metered: Mutex<Metered<S>>,
    period: Duration,
    /// Whether the source needs a sampling thread ([`EnergyReader::needs_sampling`]).
    sampled: bool,
    /// Told each of the sampler's readings, in the sampler's thread, after the reading's
    /// lock is released: Slurm's calls never wait on it.
    observer: Mutex<Option<Observer>>,
    /// The running sampler's control, to wake it for a reading now.
    sampler: Mutex<Option<Arc<Control>>>,
}

/// What [`Metering::observe`] is given: told the accounting and the reading of each sample
/// (its devices and hardware counts beside the energy the accounting took).
pub(crate) type Observer = Box<dyn FnMut(&Accounting, &Reading) + Send>;

struct Metered<S> {
    source: S,
    accounting: Accounting,
    /// When the source was last read, successfully or not.
    sampled_at: Instant,
    /// A failure episode is logged once, not at every read.
    failing: bool,
}

impl<S: EnergyReader> Meter<S> {
    /// Takes the first reading now; sampling starts with [`Metering::ensure_sampling`].
    pub(crate) fn new(source: S) -> Self {
        let period = source.sample_period();
        let sampled = source.needs_sampling();
        let shared = Arc::new(Shared {
            metered: Mutex::new(Metered {
                source,
                accounting: Accounting::new(SystemTime::now()),
                sampled_at: Instant::now(),
                failing: false,
            }),
            period,
            sampled,
            observer: Mutex::new(None),
            sampler: Mutex::new(None),
        });
        shared.sample();
        Self {
            shared,
            sampler: None,
        }
    }
}

/// A meter of any source, as the plugin holds it.
pub trait Metering: Send {
    /// Starts the sampling thread unless it runs (again, if it ended or could not start).
    fn ensure_sampling(&mut self);
    /// Reads the source now and returns the accounting.
    fn refresh(&self) -> Accounting;
    /// The accounting, reading the source only if the sampler has not within one period.
    fn recent(&self) -> Accounting;
    /// The accounting as of the latest reading.
    fn snapshot(&self) -> Accounting;
    /// Readings older than this are unavailable.
    fn stale_after(&self) -> Duration;
    /// Has `observer` told each reading the sampling thread takes.
    fn observe(&mut self, observer: Observer);
    /// What makes the sampling thread take a reading now (and tell the observer).
    fn waker(&self) -> Box<dyn Fn() + Send + Sync>;
    /// What it reads, in one line ([`EnergyReader::describe`]).
    fn describe(&self) -> String;
}

impl<S: EnergyReader> Metering for Meter<S> {
    fn describe(&self) -> String {
        self.shared.lock().source.describe()
    }

    fn stale_after(&self) -> Duration {
        stale_after(self.shared.period)
    }

    fn ensure_sampling(&mut self) {
        if !self.shared.sampled || self.sampler.as_ref().is_some_and(|s| !s.has_ended()) {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let period = self.shared.period;
        match Worker::spawn("energy-sampler", move |control| {
            while control.wait(Some(period)) {
                let (accounting, reading) = shared.sample_reading();
                if let Some(observer) = shared
                    .observer
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_mut()
                {
                    observer(&accounting, &reading);
                }
            }
        }) {
            Ok(worker) => {
                *self
                    .shared
                    .sampler
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(worker.control()));
                self.sampler = Some(worker);
            }
            Err(e) => log::error!(
                "{e}; energy is read only when Slurm polls, so counter wraps between polls \
                 may be missed"
            ),
        }
    }

    fn refresh(&self) -> Accounting {
        self.shared.sample()
    }

    fn recent(&self) -> Accounting {
        let metered = self.shared.lock();
        if metered.sampled_at.elapsed() <= self.shared.period {
            return metered.accounting;
        }
        drop(metered);
        self.shared.sample()
    }

    fn snapshot(&self) -> Accounting {
        self.shared.lock().accounting
    }

    fn waker(&self) -> Box<dyn Fn() + Send + Sync> {
        let shared = Arc::clone(&self.shared);
        Box::new(move || {
            if let Some(control) = shared
                .sampler
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
            {
                control.wake();
            }
        })
    }

    fn observe(&mut self, observer: Observer) {
        *self
            .shared
            .observer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(observer);
    }
}

impl<S: EnergyReader> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, Metered<S>> {
        self.metered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sample(&self) -> Accounting {
        self.sample_reading().0
    }

    /// Reads the source; its accounting, and this reading.
    fn sample_reading(&self) -> (Accounting, Reading) {
        let mut metered = self.lock();
        let now = Instant::now();
        metered.sampled_at = now;
        let reading = metered.source.read(now);
        if reading.complete {
            if metered.failing {
                log::info!("energy readings are back");
                metered.failing = false;
            }
            for problem in &reading.problems {
                log::warn!("{problem}");
            }
        } else if !metered.failing && !reading.problems.is_empty() {
            log::error!(
                "reading energy failed: {}; reporting the last good reading until it is older \
                 than {} s, then no energy (NO_VAL)",
                reading.problems.join("; "),
                stale_after(self.period).as_secs()
            );
            metered.failing = true;
        }
        metered.accounting.record(&reading, now, SystemTime::now());
        (metered.accounting, reading)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    struct Counted {
        reads: Arc<AtomicU32>,
        sampled: bool,
    }

    impl EnergyReader for Counted {
        fn describe(&self) -> String {
            "counted".into()
        }

        fn read(&mut self, _now: Instant) -> Reading {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Reading {
                complete: true,
                ..Reading::default()
            }
        }

        fn sample_period(&self) -> Duration {
            Duration::from_millis(10)
        }

        fn needs_sampling(&self) -> bool {
            self.sampled
        }
    }

    /// A source that needs no sampling gets no thread: it is read only at Slurm's calls.
    #[test]
    fn only_sources_that_need_it_are_sampled() {
        for sampled in [true, false] {
            let reads = Arc::new(AtomicU32::new(0));
            let mut meter = Meter::new(Counted {
                reads: Arc::clone(&reads),
                sampled,
            });
            meter.ensure_sampling();
            std::thread::sleep(Duration::from_millis(200));
            drop(meter);
            let reads = reads.load(Ordering::SeqCst);
            if sampled {
                assert!(reads >= 5, "{reads} reads in 200 ms at 10 ms");
            } else {
                assert_eq!(reads, 1, "only the first reading, when the meter opened");
            }
        }
    }
}
