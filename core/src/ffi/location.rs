//! Where the plugin's own `.so` is, for sources that keep helper programs beside it, and
//! keeping it mapped while a thread of it outlives `fini`.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// The path of the shared object this code was loaded from, as the loader knows it.
fn own_file() -> Option<CString> {
    // SAFETY: an all-zero Dl_info is a valid value to be filled in.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_file as *const () as *const libc::c_void;
    // SAFETY: `here` is an address inside this object; dladdr only fills `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the dynamic loader.
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_owned())
}

/// The directory of the shared object this code was loaded from.
pub fn plugin_directory() -> Option<PathBuf> {
    let file = own_file()?;
    PathBuf::from(file.to_string_lossy().into_owned())
        .parent()
        .map(PathBuf::from)
}

/// Keeps this shared object mapped for the rest of the process: a worker thread was left
/// in a hanging call at `fini` (scheduler::worker::on_abandon), and Slurm's `dlclose` after `fini`
/// would unmap the code it returns into. `RTLD_NOLOAD | RTLD_NODELETE` marks the loaded
/// object as never to be unloaded; the reference it takes is never released either.
pub fn keep_mapped() {
    let Some(file) = own_file() else {
        log::error!(
            "cannot find this plugin's file to keep it loaded: a thread left running may crash the daemon if Slurm unloads the plugin"
        );
        return;
    };
    // SAFETY: `file` is a NUL-terminated path; with RTLD_NOLOAD dlopen loads nothing new,
    // it only takes a reference to the object already loaded and sets its flag.
    let handle = unsafe {
        libc::dlopen(
            file.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    if handle.is_null() {
        log::error!(
            "cannot keep {} loaded: a thread left running may crash the daemon if Slurm unloads the plugin",
            file.to_string_lossy()
        );
    }
}
