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

/// A NUL-terminated byte array of `parts` joined, for `plugin_name`/`plugin_type`, which
/// Slurm reads as `char[]` through `dlsym`; evaluated at compile time, where a wrong length
/// or an interior NUL fails the build.
pub const fn nul_joined<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let (mut at, mut part) = (0, 0);
    while part < parts.len() {
        let bytes = parts[part].as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            assert!(bytes[i] != 0, "interior NUL");
            assert!(at + 1 < N, "array length must be the text length + 1");
            out[at] = bytes[i];
            at += 1;
            i += 1;
        }
        part += 1;
    }
    assert!(at + 1 == N, "array length must be the text length + 1");
    out
}

/// For the macro: the family's entry a plugin's descriptor names, whose name is its
/// `plugin_type`.
pub use slurm_energy_logic::FamilyMember;
/// For the macro: the plugin whose name the family declares.
pub use slurm_energy_logic::PluginKind;

/// What every `plugin_type` of the family starts with.
const TYPE_PREFIX: &str = "acct_gather_energy/";

/// The length of the `plugin_type` of plugin `kind`, its NUL included.
pub const fn plugin_type_len(kind: PluginKind) -> usize {
    TYPE_PREFIX.len() + kind.name().len() + 1
}

/// The `plugin_type` of plugin `kind`, NUL-terminated: `acct_gather_energy/rust_rapl`.
pub const fn plugin_type<const N: usize>(kind: PluginKind) -> [u8; N] {
    nul_joined(&[TYPE_PREFIX, kind.name()])
}

/// The text of a NUL-terminated `plugin_type`, without its NUL.
pub const fn type_text(bytes: &'static [u8]) -> &'static str {
    let Some((&0, text)) = bytes.split_last() else {
        panic!("plugin_type is NUL-terminated")
    };
    match std::str::from_utf8(text) {
        Ok(text) => text,
        Err(_) => panic!("plugin_type is UTF-8"),
    }
}

/// A C string from any text; interior NULs (which C would cut at) become `?`.
fn c_string(text: &str) -> std::ffi::CString {
    std::ffi::CString::new(text.replace('\0', "?")).unwrap_or_default()
}
