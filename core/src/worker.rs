//! The one background-thread primitive: a named thread that sleeps until a period passes,
//! someone wakes it, or it is asked to stop; stopped and joined on drop; a panic in it is
//! contained and logged, never unwinding into Slurm.
//!
//! Every thread the plugins start (the meter's sampler, the power poller, the thread that
//! asks slurmd) is one of these, so stopping is prompt and uniform: `fini` never waits
//! longer than the one call the thread may be in.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::guard::guard;

/// How a worker's body waits, and learns that it must stop.
#[derive(Default)]
pub struct Control {
    flags: Mutex<Flags>,
    changed: Condvar,
}

#[derive(Default)]
struct Flags {
    stop: bool,
    /// A wake-up not yet consumed by `wait`.
    woken: bool,
}

impl Control {
    fn lock(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps until `timeout` passes (`None`: no timeout) or [`Control::wake`] is called;
    /// returns at once if that already happened. `false` means: stop now.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
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
    pub fn wake(&self) {
        self.lock().woken = true;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

/// A running background thread; dropping it stops and joins it.
pub struct Worker {
    name: &'static str,
    control: Arc<Control>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts `body` in a thread named `name`. The body loops on [`Control::wait`] and
    /// returns when it says stop.
    pub fn spawn(
        name: &'static str,
        body: impl FnOnce(&Control) + Send + 'static,
    ) -> Result<Self, String> {
        let control = Arc::new(Control::default());
        let theirs = Arc::clone(&control);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || guard(name, (), || body(&theirs)))
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        Ok(Self {
            name,
            control,
            handle: Some(handle),
        })
    }

    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The body returned (after a panic, which was logged): the owner may start a new one.
    pub fn has_ended(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.control.stop();
        if let Some(handle) = self.handle.take()
            && handle.join().is_err()
        {
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
