//! Where the plugin's own `.so` is, for sources that keep helper programs beside it.

use std::ffi::CStr;
use std::path::PathBuf;

/// The directory of the shared object this code was loaded from.
pub fn plugin_directory() -> Option<PathBuf> {
    // SAFETY: an all-zero Dl_info is a valid value to be filled in.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = plugin_directory as *const () as *const libc::c_void;
    // SAFETY: `here` is an address inside this object; dladdr only fills `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the dynamic loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) };
    PathBuf::from(file.to_string_lossy().into_owned())
        .parent()
        .map(PathBuf::from)
}
