//! The sampler process, seen from the plugin: start it, read its lines (see
//! [`super::protocol`]) with a deadline, kill and reap it. The sampler moves the pipe off
//! its fd 1 before loading Variorum, so nothing the library prints can land in it.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::json::JsonError;
use super::protocol::{Invocation, Line, MAX_LINE};

/// Why the sampler gave no sample.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The program could not be started.
    #[error("cannot start the sampler {path}: {source}")]
    Spawn {
        /// The sampler's path.
        path: PathBuf,
        /// The error starting it.
        source: io::Error,
    },
    /// The pipe could not be set up (why).
    #[error("cannot set up the pipe from the sampler: {0}")]
    Pipe(String),
    /// Nothing came in time; the sampler was killed.
    #[error("no {what} from the sampler within {secs:.1} s (Variorum hung?); killed it")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long, in seconds.
        secs: f64,
    },
    /// The sampler ended.
    #[error("the sampler {status} (Variorum exited or crashed?)")]
    Exited {
        /// How it ended.
        status: String,
    },
    /// The pipe could not be read.
    #[error("reading from the sampler: {0}")]
    Read(io::Error),
    /// A line longer than the protocol allows.
    #[error("the sampler sent more than {MAX_LINE} bytes without a newline")]
    LineTooLong,
    /// A line the protocol does not know (why).
    #[error("the sampler sent an unreadable line: {0}")]
    Protocol(String),
    /// Variorum reported a failure (its message).
    #[error("{0}")]
    Variorum(String),
    /// Variorum's JSON gives no node power.
    #[error("Variorum's JSON: {0}")]
    Json(#[from] JsonError),
}

/// A running sampler. Dropping it kills and reaps the process.
pub struct Sampler {
    child: Child,
    out: ChildStdout,
    partial: Vec<u8>,
    lines: VecDeque<String>,
    reaped: bool,
}

impl Sampler {
    /// Starts `program`. Its standard output is the pipe the samples come through: std
    /// passes exactly that one descriptor (its other pipe ends are `O_CLOEXEC`), and the
    /// sampler closes anything else it inherited from slurmd before loading Variorum.
    pub fn spawn(program: &Path, library: &str, period: Duration) -> Result<Self, SamplerError> {
        let invocation = Invocation {
            library: library.to_string(),
            period,
            result_fd: 1,
            parent: Some(std::process::id()),
        };
        let mut child = Command::new(program)
            .args(invocation.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // The sampler points its stderr elsewhere once it runs; before that only a
            // failing exec could write here, which spawn() reports anyway.
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| SamplerError::Spawn {
                path: program.to_path_buf(),
                source,
            })?;
        let Some(out) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SamplerError::Pipe(
                "no pipe for the sampler's output".into(),
            ));
        };
        let mut sampler = Self {
            child,
            out,
            partial: Vec::new(),
            lines: VecDeque::new(),
            reaped: false,
        };
        // Non-blocking, so that one read() never outlives the deadline of a sample.
        if let Err(e) = fcntl(sampler.out.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)) {
            sampler.kill();
            return Err(SamplerError::Pipe(e.to_string()));
        }
        Ok(sampler)
    }

    /// The sampler's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The oldest unread line, waiting for one until `deadline`.
    pub fn oldest(&mut self, deadline: Instant, what: &'static str) -> Result<Line, SamplerError> {
        self.wait_for_lines(deadline, what)?;
        let line = self.lines.pop_front().unwrap_or_default();
        decode(&line)
    }

    /// The newest line, waiting for one until `deadline`; older unread lines are dropped,
    /// so a poller that fell behind gets the freshest sample, not a backlog.
    pub fn newest(&mut self, deadline: Instant, what: &'static str) -> Result<Line, SamplerError> {
        self.wait_for_lines(deadline, what)?;
        let line = self.lines.pop_back().unwrap_or_default();
        self.lines.clear();
        decode(&line)
    }

    fn wait_for_lines(
        &mut self,
        deadline: Instant,
        what: &'static str,
    ) -> Result<(), SamplerError> {
        let started = Instant::now();
        loop {
            let eof = self.drain()?;
            if !self.lines.is_empty() {
                return Ok(());
            }
            if eof {
                return Err(SamplerError::Exited {
                    status: self.kill_and_describe(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                self.kill();
                return Err(SamplerError::Timeout {
                    what,
                    secs: now.saturating_duration_since(started).as_secs_f64(),
                });
            }
            // Round up so that a sub-millisecond remainder does not spin.
            let left = deadline.saturating_duration_since(now) + Duration::from_micros(999);
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(self.out.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    self.kill();
                    return Err(SamplerError::Read(e.into()));
                }
            }
        }
    }

    /// Reads everything available now into complete lines. True at end of file.
    fn drain(&mut self) -> Result<bool, SamplerError> {
        let mut chunk = [0u8; 8192];
        loop {
            match self.out.read(&mut chunk) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    self.partial.extend_from_slice(&chunk[..n]);
                    while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                        let rest = self.partial.split_off(end + 1);
                        let line = std::mem::replace(&mut self.partial, rest);
                        let text = String::from_utf8_lossy(&line[..end]).trim().to_string();
                        if !text.is_empty() {
                            self.lines.push_back(text);
                        }
                    }
                    if self.partial.len() > MAX_LINE {
                        self.kill();
                        return Err(SamplerError::LineTooLong);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.kill();
                    return Err(SamplerError::Read(e));
                }
            }
        }
    }

    /// SIGKILL and reap; idempotent.
    pub fn kill(&mut self) {
        let _ = self.kill_and_status();
    }

    fn kill_and_status(&mut self) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        // The sampler may have exited already: then kill() is a no-op on the zombie and
        // wait() collects its real status.
        let _ = self.child.kill();
        self.reaped = true;
        match self.child.wait() {
            Ok(status) => Some(status),
            Err(e) => {
                // ECHILD: something else in the daemon reaped it (waitpid(-1)).
                log::debug!("reaping the Variorum sampler: {e}");
                None
            }
        }
    }

    fn kill_and_describe(&mut self) -> String {
        match self.kill_and_status() {
            Some(status) => describe_status(status),
            None => "ended".into(),
        }
    }
}

fn decode(line: &str) -> Result<Line, SamplerError> {
    Line::decode(line).map_err(|e| SamplerError::Protocol(e.to_string()))
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a process ended, in words (its exit code or signal).
pub(crate) fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => match nix::sys::signal::Signal::try_from(sig) {
            Ok(name) => format!("was killed by signal {sig} ({name})"),
            Err(_) => format!("was killed by signal {sig}"),
        },
        None => format!("ended ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_lines_are_protocol_errors() {
        for bad in ["garbage", "{\"ok\":true}"] {
            let err = decode(bad).expect_err(bad);
            assert!(matches!(err, SamplerError::Protocol(_)), "{bad}");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    /// The sampler `script`, spawned once no other thread's fork holds it open for
    /// writing: a test thread that forks while another writes its script copies the
    /// written file's descriptor until its child execs, and exec refuses a file open for
    /// writing (`ETXTBSY`).
    fn spawned(script: &Path) -> Sampler {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match Sampler::spawn(script, "lib", Duration::from_secs(1)) {
                Err(SamplerError::Spawn { source, .. })
                    if source.kind() == std::io::ErrorKind::ExecutableFileBusy
                        && Instant::now() < until =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                spawned => return spawned.expect("spawn"),
            }
        }
    }

    #[test]
    fn lines_are_assembled_across_reads_and_the_newest_wins() {
        let dir = tempfile::tempdir().expect("tmp");
        let script = dir.path().join("fake-sampler");
        std::fs::write(
            &script,
            "#!/bin/sh\nprintf '{\"ok\":true,\"json\":\"one\"}\\n{\"ok\":'\nsleep 0.2\n\
             printf 'true,\"json\":\"two\"}\\n'\nsleep 0.2\nprintf '{\"ok\":true,\"json\":\"three\"}\\n'\n\
             exec sleep 30\n",
        )
        .expect("script");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut s = spawned(&script);
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            s.oldest(deadline, "line").expect("one"),
            Line::Sample {
                json: "one".into(),
                t_ns: None
            }
        );
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(
            s.newest(deadline, "line").expect("newest"),
            Line::Sample {
                json: "three".into(),
                t_ns: None
            }
        );
        let start = Instant::now();
        let err = s
            .newest(Instant::now() + Duration::from_millis(300), "sample")
            .expect_err("nothing more");
        assert!(matches!(err, SamplerError::Timeout { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(2));
        let pid = s.pid();
        drop(s);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
    }

    /// std passes the write end as fd 1 and keeps its read end (and its other pipe ends)
    /// close-on-exec; descriptors others opened without O_CLOEXEC are the sampler's to
    /// close (tested with the sampler in plugins/variorum-sampler/tests).
    #[test]
    fn the_child_gets_the_write_end_only() {
        let dir = tempfile::tempdir().expect("tmp");
        let script = dir.path().join("list-fds");
        std::fs::write(&script, "#!/bin/sh\nexec ls -l /proc/self/fd/\n").expect("script");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut s = spawned(&script);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut fds = Vec::new();
        while s.wait_for_lines(deadline, "listing").is_ok() {
            fds.extend(s.lines.drain(..));
        }
        // `ls -l` lines end in "<fd> -> <target>"
        let target = |fd: &str| {
            fds.iter()
                .find_map(|l| {
                    l.split_once(&format!(" {fd} -> "))
                        .map(|(_, t)| t.to_string())
                })
                .unwrap_or_default()
        };
        assert_eq!(target("0"), "/dev/null", "{fds:?}");
        assert_eq!(target("2"), "/dev/null", "{fds:?}");
        let pipe = target("1");
        assert!(pipe.starts_with("pipe:"), "{fds:?}");
        let ends = fds
            .iter()
            .filter(|l| l.ends_with(&format!("-> {pipe}")))
            .count();
        assert_eq!(ends, 1, "the read end leaked into the child: {fds:?}");
    }

    #[test]
    fn end_of_file_reports_the_exit_status() {
        let mut s =
            Sampler::spawn(Path::new("/bin/false"), "lib", Duration::from_secs(1)).expect("spawn");
        let err = s
            .newest(Instant::now() + Duration::from_secs(5), "sample")
            .expect_err("eof");
        assert_eq!(
            err.to_string(),
            "the sampler exited with status 1 (Variorum exited or crashed?)"
        );
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let err = Sampler::spawn(
            Path::new("/nonexistent/sampler"),
            "lib",
            Duration::from_secs(1),
        )
        .err()
        .expect("no such program");
        assert!(err.to_string().contains("/nonexistent/sampler"), "{err}");
    }
}
