//! The system call of `senergy check --compare`: one counter of the kernel's perf events
//! (`perf_event_open(2)`), opened system-wide on one CPU and read as a 64-bit count. Which
//! PMU, event and CPU, and what a count means, is `check`'s RAPL reader's business
//! (`check::readers::rapl_perf`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::FromRawFd;

/// `struct perf_event_attr` up to its first published size (`PERF_ATTR_SIZE_VER0`, 64
/// bytes): enough for a counting event; the kernel takes the size it is given (libc has
/// no binding for it).
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// The bit fields (`disabled`, `inherit`, ...): all clear, so the counter counts from
    /// its opening.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_ATTR_SIZE_VER0: u32 = 64;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// One open counter.
pub struct Counter(File);

impl Counter {
    /// Event `config` of PMU `pmu_type` (its sysfs `type`), counting on `cpu` for every
    /// process (as an uncore PMU such as RAPL's requires).
    pub fn open(pmu_type: u32, config: u64, cpu: u32) -> io::Result<Counter> {
        let attr = Attr {
            kind: pmu_type,
            size: PERF_ATTR_SIZE_VER0,
            config,
            ..Attr::default()
        };
        let cpu = libc::c_int::try_from(cpu).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `attr` is a valid perf_event_attr of the size it declares and outlives
        // the call; pid -1 with a CPU counts every process there; no group.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                std::ptr::from_ref(&attr),
                -1 as libc::pid_t,
                cpu,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::c_int::try_from(fd).map_err(|_| io::ErrorKind::InvalidData)?;
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        Ok(Counter(unsafe { File::from_raw_fd(fd) }))
    }

    /// The count since the counter was opened.
    pub fn read(&mut self) -> io::Result<u64> {
        let mut word = [0u8; 8];
        self.0.read_exact(&mut word)?;
        Ok(u64::from_ne_bytes(word))
    }
}
