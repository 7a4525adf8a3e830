//! Simulated hardware keeps time as hardware does.

use std::fs;
use std::path::Path;

/// A memory filesystem the test runner (ci/run-tests.py) mounts for the test alone, in its
/// own mount namespace, for the simulators' files.
pub const MEMORY_DIR_VAR: &str = "ENERGY_TESTS_HW_DIR";

/// Makes `dir` for a simulator's hardware files: in memory where the test runner gives a
/// memory filesystem ([`MEMORY_DIR_VAR`]; `dir` is then a link to a directory there), as
/// the kernel keeps sysfs and the msr device. On a disk, a loaded machine's journal holds
/// a simulator's writes back for hundreds of milliseconds: its counters then stand still
/// and jump, which no hardware does (a 10 ms-tick raplsim on this machine's /tmp while
/// tests and builds ran: p99 367 ms and max 500 ms behind; on tmpfs, max 11 ms).
pub fn hardware_dir(dir: &Path) {
    let memory = std::env::var_os(MEMORY_DIR_VAR).filter(|m| Path::new(m).is_dir());
    if let (Some(memory), false) = (memory, dir.exists()) {
        let kept = tempfile::Builder::new()
            .prefix("hw")
            .tempdir_in(memory)
            .expect("a simulator's directory in memory")
            .keep();
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        std::os::unix::fs::symlink(&kept, dir).expect("link to the simulator's directory");
        return;
    }
    fs::create_dir_all(dir).expect("mkdir a simulator's directory");
}

/// Runs this process at the lowest real-time priority (`SCHED_FIFO` 1), where it may: a
/// simulator's counters then advance at each of its ticks however busy the machine is with
/// the clusters under test. A simulator starved for 80 ms reads as a power dip and then a
/// burst, which no hardware meter shows. Its work per tick is microseconds and it sleeps
/// between ticks, so it takes nothing from the rest. Where real-time scheduling is not
/// allowed (no `CAP_SYS_NICE`), the highest nice priority; failing that, as it is.
/// Call it before starting threads: they inherit it.
pub fn keep_hardware_time() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain system calls on this process (pid 0), with a valid parameter
    unsafe {
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, -20);
        }
    }
}
