//! The one background-thread primitive: a named thread that sleeps until a period passes,
//! someone wakes it, or it is asked to stop; stopped and joined on drop; a panic in it is
//! contained and logged, never unwinding into Slurm.
//!
//! Every thread the plugins start (the meter's sampler, the pollers of power and GPUs
//! (see [`crate::scheduler`]), the ledger's doorbell) is one of these, so stopping is prompt
//! and uniform. A thread stuck in a call that hangs (a frozen BMC's HTTP request, an NVML
//! call to a GPU fallen off the bus) cannot be interrupted: stopping waits [`STOP_WAIT`]
//! for it, then leaves it to end on its own, so `fini`, and with it slurmd's shutdown,
//! never waits on hardware. A thread left running still runs this library's code, which
//! must then stay mapped after Slurm's `dlclose`: the hook set by [`on_abandon`] (the FFI
//! layer's, in `slurm-energy`) sees to it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::guard::guard;

/// How a worker's body waits, and learns that it must stop.
#[derive(Default)]
pub(crate) struct Control {
    flags: Mutex<Flags>,
    changed: Condvar,
}

#[derive(Default)]
struct Flags {
    stop: bool,
    /// A wake-up not yet consumed by `wait`.
    woken: bool,
    /// The body returned (or panicked, which the guard logged).
    ended: bool,
}

/// How long stopping a worker waits for its body to return. A plugin has at most four
/// workers (slurmd's sample loop, its doorbell, its ledger's writer, a poller), so `fini`
/// returns within a second however many of them hang.
pub(crate) const STOP_WAIT: Duration = Duration::from_millis(200);

static ABANDON_HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets what runs when a worker is left running past `STOP_WAIT` (once per process; a
/// later call changes nothing).
pub fn on_abandon(hook: fn()) {
    let _ = ABANDON_HOOK.set(hook);
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps until `timeout` passes (`None`: no timeout) or [`Control::wake`] is called;
    /// returns at once if that already happened. `false` means: stop now.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> bool {
        let mut flags = self.lock();
        if !flags.stop && !flags.woken {
            flags = match timeout {
                Some(t) => {
                    self.changed
                        .wait_timeout_while(flags, t, |f| !f.stop && !f.woken)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait_while(flags, |f| !f.stop && !f.woken)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
        flags.woken = false;
        !flags.stop
    }

    /// Ends the worker's current or next `wait` early.
    pub(crate) fn wake(&self) {
        self.lock().woken = true;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    fn end(&self) {
        self.lock().ended = true;
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for the body to return; whether it did.
    fn wait_ended(&self, timeout: Duration) -> bool {
        self.changed
            .wait_timeout_while(self.lock(), timeout, |f| !f.ended)
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .ended
    }
}

/// A running background thread; dropping it stops and joins it.
pub(crate) struct Worker {
    name: &'static str,
    control: Arc<Control>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts `body` in a thread named `name`. The body loops on [`Control::wait`] and
    /// returns when it says stop.
    pub(crate) fn spawn(
        name: &'static str,
        body: impl FnOnce(&Control) + Send + 'static,
    ) -> Result<Self, String> {
        let control = Arc::new(Control::default());
        let theirs = Arc::clone(&control);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                guard(name, (), || body(&theirs));
                theirs.end();
            })
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        Ok(Self {
            name,
            control,
            handle: Some(handle),
        })
    }

    pub(crate) fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The body returned (after a panic, which was logged): the owner may start a new one.
    pub(crate) fn has_ended(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.control.stop();
        let Some(handle) = self.handle.take() else {
            return;
        };
        if !self.control.wait_ended(STOP_WAIT) {
            log::warn!(
                "the {} thread is still in a call after {} ms: left to end on its own",
                self.name,
                STOP_WAIT.as_millis()
            );
            if let Some(hook) = ABANDON_HOOK.get() {
                hook();
            }
            // dropping the handle detaches the thread
            return;
        }
        if handle.join().is_err() {
            // The guard catches the body's panics; this is only a panic in the guard itself.
            log::error!("the {} thread ended abnormally", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    #[test]
    fn wakes_periodically_and_stops_at_once_on_drop() {
        let ticks = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&ticks);
        let worker = Worker::spawn("test-periodic", move |control| {
            while control.wait(Some(Duration::from_millis(10))) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })
        .expect("spawn");
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        drop(worker);
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        let n = ticks.load(Ordering::SeqCst);
        assert!((3..=25).contains(&n), "{n} ticks in 200 ms at 10 ms");
    }

    #[test]
    fn a_long_sleep_is_interrupted_by_stop_and_by_wake() {
        let woke = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&woke);
        let worker = Worker::spawn("test-wake", move |control| {
            while control.wait(None) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        })
        .expect("spawn");
        worker.control().wake();
        let t0 = Instant::now();
        while woke.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(woke.load(Ordering::SeqCst), 1);
        let t0 = Instant::now();
        drop(worker);
        assert!(t0.elapsed() < Duration::from_millis(100));
    }

    static ABANDONED: AtomicU32 = AtomicU32::new(0);

    fn count_abandoned() {
        ABANDONED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_body_stuck_in_a_call_is_left_behind_in_bounded_time() {
        on_abandon(count_abandoned);
        let returned = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&returned);
        let worker = Worker::spawn("test-stuck", move |control| {
            control.wait(Some(Duration::from_millis(1)));
            // a call that hangs and knows nothing of stop
            std::thread::sleep(Duration::from_secs(2));
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .expect("spawn");
        std::thread::sleep(Duration::from_millis(50));
        // other tests in this process may leave workers behind too
        let abandoned_before = ABANDONED.load(Ordering::SeqCst);
        let t0 = Instant::now();
        drop(worker);
        let took = t0.elapsed();
        assert!(
            took >= STOP_WAIT && took < STOP_WAIT + Duration::from_millis(150),
            "{took:?}"
        );
        assert!(ABANDONED.load(Ordering::SeqCst) > abandoned_before);
        assert_eq!(returned.load(Ordering::SeqCst), 0, "still in its call");
    }

    #[test]
    fn a_panicking_body_is_contained_and_seen_as_ended() {
        let worker = Worker::spawn("test-panic", |_| panic!("boom")).expect("spawn");
        let t0 = Instant::now();
        while !worker.has_ended() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(worker.has_ended());
        drop(worker); // joins without propagating the panic
    }
}
