//! Where the library's stdout and stderr go: a scratch memfd, emptied before each call,
//! so that nothing Variorum prints reaches the result pipe and its last words can be
//! quoted when a call fails.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, OwnedFd};

/// How much of what the library printed is quoted in an error line.
const OUTPUT_TAIL: usize = 600;

/// What the library printed since the last [`Capture::reset`]; `None` when no memfd
/// could be made (then its output goes to /dev/null).
pub struct Capture(Option<File>);

impl Capture {
    /// Points fds 1 and 2 at a memfd (or /dev/null): never at the result pipe.
    pub fn install() -> Result<Capture, String> {
        let file = nix::sys::memfd::memfd_create(
            c"variorum-output",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .ok()
        .map(File::from);
        let target: OwnedFd = match &file {
            Some(f) => f.as_fd().try_clone_to_owned().map_err(|e| e.to_string())?,
            None => File::options()
                .write(true)
                .open("/dev/null")
                .map_err(|e| format!("/dev/null: {e}"))?
                .into(),
        };
        nix::unistd::dup2_stdout(&target).map_err(|e| e.to_string())?;
        nix::unistd::dup2_stderr(&target).map_err(|e| e.to_string())?;
        Ok(Capture(file))
    }

    /// Forgets what was printed so far.
    pub fn reset(&mut self) {
        flush_stdio();
        if let Some(f) = &mut self.0 {
            // fds 1 and 2 share this file's offset: rewinding here rewinds them too
            let _ = f.set_len(0);
            let _ = f.seek(SeekFrom::Start(0));
        }
    }

    /// " (library output: ...)" with the end of what was printed since `reset`, or ""
    /// when nothing was.
    pub fn tail(&mut self) -> String {
        flush_stdio();
        let Some(f) = &mut self.0 else {
            return String::new();
        };
        // only the end matters, however much the library printed
        let len = f.metadata().map_or(0, |m| m.len());
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(len.saturating_sub(8192))).is_err()
            || f.read_to_end(&mut bytes).is_err()
        {
            return String::new();
        }
        quote(&String::from_utf8_lossy(&bytes))
    }
}

/// The last [`OUTPUT_TAIL`] characters of `printed`, whitespace collapsed.
fn quote(printed: &str) -> String {
    let text = printed.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .rev()
        .nth(OUTPUT_TAIL)
        .map_or(0, |(i, _)| i);
    let ellipsis = if start > 0 { "..." } else { "" };
    format!(" (library output: {ellipsis}{})", &text[start..])
}

/// Pushes out what the library printed with stdio: stdout is not a terminal, so printf
/// output waits in libc's buffer.
fn flush_stdio() {
    // SAFETY: fflush(NULL) flushes every open stdio output stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quote_is_the_collapsed_end_of_the_output() {
        assert_eq!(quote(" \n\t "), "");
        assert_eq!(
            quote("hwloc:\n  failed\tto load\n"),
            " (library output: hwloc: failed to load)"
        );
        let long = format!("start {}end", "é".repeat(2 * OUTPUT_TAIL));
        let quoted = quote(&long);
        assert!(quoted.starts_with(" (library output: ...é"), "{quoted}");
        assert!(quoted.ends_with("éend)"), "{quoted}");
        assert_eq!(
            quoted.chars().filter(|&c| c == 'é').count(),
            OUTPUT_TAIL - 2
        );
    }
}
