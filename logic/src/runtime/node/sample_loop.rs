//! slurmd's one sample loop: every sample period, or at once when a step's question wakes
//! it, the meter polls the node's source and the ledger's keeper takes that sample.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Keeper;
use crate::exchange::doorbell::RESAMPLE;
use crate::meter::Meter;
use crate::scheduler::worker::{Control, Worker};

/// The loop's thread, and what it samples and tells.
pub(super) struct SampleLoop {
    meter: Meter,
    /// Told each of the loop's samples; `None` where the node has no ledger (said). Kept
    /// here, not in the thread, so a loop started again (after a panic, logged) goes on
    /// with the same ledger.
    keeper: Arc<Mutex<Option<Keeper>>>,
    /// The running loop's control, for [`SampleLoop::waker`].
    control: Arc<Mutex<Option<Arc<Control>>>>,
    worker: Option<Worker>,
}

impl SampleLoop {
    /// A loop over `meter` telling `keeper`; it starts with [`SampleLoop::ensure_running`].
    pub(super) fn new(meter: Meter, keeper: Option<Keeper>) -> Self {
        Self {
            meter,
            keeper: Arc::new(Mutex::new(keeper)),
            control: Arc::new(Mutex::new(None)),
            worker: None,
        }
    }

    /// The meter it samples (Slurm's calls poll it too).
    pub(super) fn meter(&self) -> &Meter {
        &self.meter
    }

    /// What makes the loop sample now: a step's question wants a fresh update.
    pub(super) fn waker(&self) -> Box<dyn Fn() + Send + Sync> {
        let control = Arc::clone(&self.control);
        Box::new(move || {
            if let Some(control) = lock(&control).as_ref() {
                control.wake();
            }
        })
    }

    /// Starts the loop's thread unless it runs (again, if it ended or could not start).
    pub(super) fn ensure_running(&mut self) {
        if self.worker.as_ref().is_some_and(|w| !w.has_ended()) {
            return;
        }
        let (meter, keeper) = (self.meter.clone(), Arc::clone(&self.keeper));
        let period = meter.period();
        let started = Worker::spawn("energy-sampler", move |control| {
            let mut wait = period;
            while control.wait(Some(wait)) {
                let (accounting, reading) = meter.sample();
                // after the meter's lock is released: Slurm's calls never wait on this
                let sooner = lock(&keeper)
                    .as_mut()
                    .is_some_and(|keeper| keeper.on_sample(&accounting, &reading));
                // a step waits for a reading taken after its ask (a controller's next scan)
                wait = if sooner { RESAMPLE.min(period) } else { period };
            }
        });
        match started {
            Ok(worker) => {
                *lock(&self.control) = Some(Arc::clone(worker.control()));
                self.worker = Some(worker);
            }
            Err(e) => log::error!(
                "{e}; energy is read only when Slurm polls, so counter wraps between polls \
                 may be missed"
            ),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::plugin::Opened;
    use crate::source::{Reading, Source};

    /// Counts its polls.
    struct Counted {
        polls: Arc<AtomicU32>,
    }

    impl Source for Counted {
        fn describe(&self) -> String {
            "counted".into()
        }

        fn poll(&mut self, _now: Instant) -> Reading {
            self.polls.fetch_add(1, Ordering::SeqCst);
            Reading {
                complete: true,
                ..Reading::default()
            }
        }
    }

    fn counted(period: Duration) -> (SampleLoop, Arc<AtomicU32>) {
        let polls = Arc::new(AtomicU32::new(0));
        let meter = Meter::new(Opened {
            source: Counted {
                polls: Arc::clone(&polls),
            },
            sample_period: period,
        });
        (SampleLoop::new(meter, None), polls)
    }

    /// The polls so far, once they reach `least` or a second has passed.
    fn polls_reach(polls: &AtomicU32, least: u32) -> u32 {
        let until = Instant::now() + Duration::from_secs(1);
        while polls.load(Ordering::SeqCst) < least && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        polls.load(Ordering::SeqCst)
    }

    #[test]
    fn the_loop_samples_at_the_sources_period_until_dropped() {
        let (mut sampling, polls) = counted(Duration::from_millis(10));
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the meter's first reading");
        sampling.ensure_running();
        assert!(polls_reach(&polls, 6) >= 6);
        drop(sampling);
        let after = polls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(polls.load(Ordering::SeqCst), after, "no poll once dropped");
    }

    /// A step's question samples at once, not a period later.
    #[test]
    fn a_wake_samples_now() {
        let (mut sampling, polls) = counted(Duration::from_secs(3600));
        sampling.ensure_running();
        let wake = sampling.waker();
        for asked in 2..5 {
            wake();
            assert_eq!(polls_reach(&polls, asked), asked);
        }
    }
}
