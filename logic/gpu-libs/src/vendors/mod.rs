//! NVML and amd-smi, loaded at run time with `dlopen` and called through their C APIs
//! (nvml.h, amd_smi/amdsmi.h); the safe [`crate::GpuLibrary`] the GPU source uses. Only the GPU
//! poller thread calls these.

mod amd_smi;
mod nvml;
mod nvml_mig;
mod nvml_types;

pub use amd_smi::open_amd_smi;
pub use nvml::open_nvml;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW, Symbol};

/// Looks a function up, naming it in the error.
///
/// # Safety
/// `T` must be the function's C signature.
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller names the signature; the library stays loaded as long as the
    // returned pointer is used (both live in the same struct, the library last dropped).
    let s: Symbol<T> =
        unsafe { lib.get(name.as_bytes()) }.map_err(|e| format!("{name} not found: {e}"))?;
    Ok(*s)
}

fn load(path: &str) -> Result<Library, String> {
    // SAFETY: loading runs the library's initialisers; NVML and amd-smi are made to be
    // loaded into any process (Slurm's own gpu plugins do so).
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| format!("cannot load {path}: {e}"))
}
