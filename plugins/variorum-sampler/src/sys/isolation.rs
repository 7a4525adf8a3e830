//! Keeps the sampler from outliving, leaking or harming what started it: it dies with its
//! parent, leaves no core files, holds no descriptor inherited from slurmd but the result
//! pipe (moved off fd 1, where the library would print), and leaves with `_exit`.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;

/// Dies with the parent (SIGKILL when the parent thread ends), first thing: a sampler
/// must never outlive the plugin that reads it.
pub fn die_with_parent() {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
}

/// Whether the parent is no longer `parent` (it died, and we were re-parented): then
/// nobody reads us. It may have died before [`die_with_parent`], so this is checked too.
pub fn parent_gone(parent: Option<u32>) -> bool {
    parent.is_some_and(|p| i32::try_from(p) != Ok(nix::unistd::getppid().as_raw()))
}

/// A library that crashes at every restart would otherwise leave a core file per
/// attempt in slurmd's working directory.
pub fn no_core_files() {
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
}

/// Keeps only the result pipe of what was inherited: closes every descriptor >= 3 but
/// `result_fd` (slurmd's sockets and files must not stay open in a process that lives as
/// long as the node), then moves the pipe to a private close-on-exec descriptor >= 3, so
/// that the library's output on fd 1 can never reach it.
pub fn take_result_pipe(result_fd: RawFd) -> Result<File, String> {
    close_inherited(result_fd);
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor number; fails cleanly if it is not open.
    let private = unsafe { libc::fcntl(result_fd, libc::F_DUPFD_CLOEXEC, 3) };
    if private < 0 {
        return Err(format!(
            "result fd {result_fd}: {}",
            std::io::Error::last_os_error()
        ));
    }
    if result_fd >= 3 {
        // SAFETY: the original is ours to close now that it is duplicated.
        unsafe { libc::close(result_fd) };
    }
    // SAFETY: `private` is a fresh descriptor owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(private) }))
}

/// Closes every descriptor >= 3 except `keep`.
fn close_inherited(keep: RawFd) {
    let ranges: &[(u32, u32)] = if keep >= 3 {
        let k = keep.unsigned_abs();
        &[(3, k - 1), (k + 1, u32::MAX)]
    } else {
        &[(3, u32::MAX)]
    };
    for &(first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: close_range only closes descriptors; nothing in this process holds
        // one yet (std's own stdio handles are fds 0-2).
        if unsafe { libc::close_range(first, last, 0) } != 0 {
            close_inherited_slowly(keep);
            return;
        }
    }
}

/// For kernels before 5.9 (no close_range).
fn close_inherited_slowly(keep: RawFd) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds.into_iter().filter(|&fd| fd >= 3 && fd != keep) {
        // SAFETY: as above; the read_dir descriptor is already closed (EBADF is harmless).
        unsafe { libc::close(fd) };
    }
}

/// Leaves without running exit handlers or library destructors: Variorum's could hang
/// or crash, and a sampler that is done must be gone. Our writes are unbuffered.
pub fn quit(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (Closing descriptors and `_exit` are tested on the sampler process, in
    /// tests/tests/variorum_sampler.rs and tests/variorum_sensor.rs.)
    #[test]
    fn the_parent_is_gone_when_it_is_not_ours_any_more() {
        let ours = u32::try_from(nix::unistd::getppid().as_raw()).expect("a parent");
        assert!(!parent_gone(None), "no parent given: never gone");
        assert!(!parent_gone(Some(ours)));
        assert!(parent_gone(Some(ours + 1)));
        assert!(parent_gone(Some(u32::MAX)), "not even a pid");
    }
}
