//! syslog(3): where a process with no terminal and no slurmd to read its stderr says what
//! failed (the record's writer that an Epilog starts, [`crate::epilog`]).

use std::ffi::CString;

/// One line to syslog (daemon facility, error level), under the program's name.
pub fn syslog(line: &str) {
    let Ok(text) = CString::new(line.replace('\0', " ")) else {
        return;
    };
    // SAFETY: the format and the text are NUL-terminated and live across the call; "%s"
    // takes the one argument given.
    unsafe {
        libc::syslog(
            libc::LOG_DAEMON | libc::LOG_ERR,
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    };
}
