//! Everything that touches Slurm: exported symbols, raw pointers, logging, acct_gather.conf.
//! The rest (the crate `slurm-energy-logic`, re-exported) is safe Rust that knows nothing of
//! Slurm.

mod conf;
mod daemon;
mod energy;
mod host;
mod job_record;
mod location;
mod log;
mod macros;
mod own_memory;
mod plugin;
mod profile;
mod slurm_conf;
mod step_record;

pub use self::log::SlurmLogger;
pub use plugin::Exported;
/// For the macro's signatures; plugins never name it themselves.
pub use slurm_sys as sys;

/// The release the plugin is built for; Slurm's loader requires an exact match.
pub const SLURM_VERSION_NUMBER: u32 = slurm_sys::SLURM_VERSION_NUMBER;

/// A NUL-terminated byte array for `plugin_name`/`plugin_type`, which Slurm reads as
/// `char[]` through `dlsym`.
pub const fn nul_terminated<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(
        bytes.len() + 1 == N,
        "array length must be the text length + 1"
    );
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i] != 0, "interior NUL");
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// A C string from any text; interior NULs (which C would cut at) become `?`.
fn c_string(text: &str) -> std::ffi::CString {
    std::ffi::CString::new(text.replace('\0', "?")).unwrap_or_default()
}
