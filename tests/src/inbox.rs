//! Commands for a running simulator (raplsim, pmsim): a file its clients append lines to
//! and the simulator reads on from where it stopped. The file is never truncated or
//! removed while the simulator runs: a client that opened it a moment before would write
//! into a file nobody reads any more (a loaded CI run lost a glitch command so).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub struct Inbox {
    path: PathBuf,
    /// Bytes already taken.
    taken: u64,
}

impl Inbox {
    /// A fresh inbox at `path`: what an earlier run left there is dropped.
    pub fn open(path: &Path) -> Inbox {
        let _ = fs::remove_file(path);
        Inbox {
            path: path.to_path_buf(),
            taken: 0,
        }
    }

    /// The whole lines appended since the last call (a line still being written waits).
    pub fn take(&mut self) -> Vec<String> {
        let Ok(file) = File::open(&self.path) else {
            return Vec::new();
        };
        let mut new = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = file.read_at(&mut chunk, self.taken + new.len() as u64) {
            if n == 0 {
                break;
            }
            new.extend_from_slice(&chunk[..n]);
        }
        let Some(end) = new.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        self.taken += end as u64 + 1;
        String::from_utf8_lossy(&new[..end])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Appends `line` to the file at `path` (an inbox, a log) in one write(2), so that lines
/// appended at the same moment by two jobs stay whole.
pub fn append_line(path: &Path, line: &str) -> Result<(), String> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines posted while the inbox is read, a line half written and a post right after a
    /// take: each taken once, none lost.
    #[test]
    fn every_line_is_taken_once_and_none_is_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("commands");
        fs::write(&path, "stale\n").expect("an old run's line");
        let mut inbox = Inbox::open(&path);
        assert!(inbox.take().is_empty());
        append_line(&path, "reset package0 0").expect("post");
        append_line(&path, "vanish package1 2.5").expect("post");
        assert_eq!(inbox.take(), ["reset package0 0", "vanish package1 2.5"]);
        assert!(inbox.take().is_empty());
        let mut half = OpenOptions::new().append(true).open(&path).expect("open");
        half.write_all(b"stuck pack").expect("half a line");
        assert!(inbox.take().is_empty(), "half a line waits");
        half.write_all(b"age0 1\n").expect("the rest");
        append_line(&path, "spike package0").expect("post");
        assert_eq!(inbox.take(), ["stuck package0 1", "spike package0"]);
    }
}
