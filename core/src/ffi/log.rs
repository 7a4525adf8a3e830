//! `log` records into the daemon's own log (slurmd.log, ...), at Slurm's levels.

use slurm_sys::{log_level, slurm_error, slurm_get_log_level, slurm_log_var};

use super::c_string;

/// Always passed as the format, so a `%` in a message is never interpreted.
const FORMAT: &std::ffi::CStr = c"%s";

pub struct SlurmLogger {
    prefix: &'static str,
}

impl SlurmLogger {
    pub const fn new(prefix: &'static str) -> Self {
        Self { prefix }
    }

    /// Routes the `log` macros of this plugin's copy of the crate to Slurm.
    pub fn install(&'static self) {
        // Already set when the plugin is re-initialised in the same process.
        if ::log::set_logger(self).is_ok() {
            ::log::set_max_level(::log::LevelFilter::Trace);
        }
    }
}

fn slurm_level(level: ::log::Level) -> core::ffi::c_int {
    match level {
        ::log::Level::Error => log_level::ERROR,
        ::log::Level::Warn | ::log::Level::Info => log_level::INFO,
        ::log::Level::Debug => log_level::DEBUG,
        ::log::Level::Trace => log_level::DEBUG2,
    }
}

impl ::log::Log for SlurmLogger {
    fn enabled(&self, metadata: &::log::Metadata) -> bool {
        // SAFETY: a plain getter exported by libslurmfull in every release.
        slurm_level(metadata.level()) <= unsafe { slurm_get_log_level() }
    }

    fn log(&self, record: &::log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let warning = if record.level() == ::log::Level::Warn {
            "warning: "
        } else {
            ""
        };
        let message = c_string(&format!("{}: {warning}{}", self.prefix, record.args()));
        // SAFETY: constant "%s" format with one valid C string argument.
        unsafe {
            match record.level() {
                ::log::Level::Error => {
                    slurm_error(FORMAT.as_ptr(), message.as_ptr());
                }
                level => slurm_log_var(slurm_level(level), FORMAT.as_ptr(), message.as_ptr()),
            }
        }
    }

    fn flush(&self) {}
}
