//! The one place a panic is stopped before it reaches C.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`; if it panics, logs the panic and returns `on_panic`. A panic unwinding into
/// Slurm would abort the daemon.
pub fn guard<R>(what: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            ::log::error!("internal error in {what}: {message}; the call returns an error");
            on_panic
        }
    }
}
