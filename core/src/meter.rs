//! A source, its accounting, and the thread that samples it often enough.
//!
//! Slurm may poll far less often than a counter wraps (AcctGatherNodeFreq=300 on an AMD node
//! wraps in ~3 min; JobAcctGatherFrequency=0 polls a step only at its end), so every process
//! that measures runs a sampler at the source's `sample_period`. Slurm's own calls also read
//! the hardware, so each figure Slurm gets is current. All reads go through one mutex; a read
//! is a few `pread`s, so no Slurm call waits on anything slow.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::accounting::Accounting;
use crate::source::EnergyReader;

/// Readings older than this many sample periods (and at least `MIN_STALE`) are unavailable.
const STALE_PERIODS: u32 = 3;
const MIN_STALE: Duration = Duration::from_secs(10);

pub struct Meter<S: EnergyReader> {
    shared: Arc<Shared<S>>,
    sampler: Option<JoinHandle<()>>,
}

struct Shared<S> {
    metered: Mutex<Metered<S>>,
    stop: Mutex<bool>,
    wake: Condvar,
    period: Duration,
}

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
    pub fn new(source: S) -> Self {
        let period = source.sample_period();
        let shared = Arc::new(Shared {
            metered: Mutex::new(Metered {
                source,
                accounting: Accounting::new(SystemTime::now()),
                sampled_at: Instant::now(),
                failing: false,
            }),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            period,
        });
        shared.sample();
        Self {
            shared,
            sampler: None,
        }
    }

    pub fn sample_period(&self) -> Duration {
        self.shared.period
    }

    /// Stops and joins the sampler.
    pub fn stop(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.sampler.take()
            && handle.join().is_err()
        {
            log::error!("the sampling thread panicked");
        }
    }
}

/// A meter of any source, as the plugin holds it.
pub trait Metering: Send {
    /// Starts the sampling thread unless it runs (again, if starting it failed before).
    fn ensure_sampling(&mut self);
    /// Reads the source now and returns the accounting.
    fn refresh(&self) -> Accounting;
    /// The accounting, reading the source only if the sampler has not within one period.
    fn recent(&self) -> Accounting;
    /// The accounting as of the latest reading.
    fn snapshot(&self) -> Accounting;
    /// Readings older than this are unavailable.
    fn stale_after(&self) -> Duration;
}

impl<S: EnergyReader> Metering for Meter<S> {
    fn stale_after(&self) -> Duration {
        (self.shared.period * STALE_PERIODS).max(MIN_STALE)
    }

    fn ensure_sampling(&mut self) {
        if self.sampler.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        match std::thread::Builder::new()
            .name("energy-sampler".into())
            .spawn(move || shared.run())
        {
            Ok(handle) => self.sampler = Some(handle),
            Err(e) => log::error!(
                "cannot start the sampling thread ({e}); energy is read only when Slurm polls, \
                 so counter wraps between polls may be missed"
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
}

impl<S: EnergyReader> Drop for Meter<S> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<S: EnergyReader> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, Metered<S>> {
        self.metered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sample(&self) -> Accounting {
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
                (self.period * STALE_PERIODS).max(MIN_STALE).as_secs()
            );
            metered.failing = true;
        }
        metered.accounting.record(&reading, now, SystemTime::now());
        metered.accounting
    }

    fn run(&self) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let (guard, _) = self
                .wake
                .wait_timeout(stop, self.period)
                .unwrap_or_else(PoisonError::into_inner);
            stop = guard;
            if *stop {
                return;
            }
            // Never hold `stop` while reading: `Meter::stop` must not wait for a read.
            drop(stop);
            self.sample();
            stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        }
    }
}
