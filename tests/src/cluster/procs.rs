//! The processes a cluster starts. Each daemon is started in a session of its own (setsid:
//! not killed by a Ctrl-C aimed at the test; `down` stops it) and recorded as
//! "PID STARTTIME" in `run/pid/NAME`: the start time (field 22 of /proc/PID/stat) guards
//! against pid reuse, so stopping a cluster never signals a process it did not start, and
//! never matches by name. Each slurmd runs under a node supervisor ([`super::nodesup`]), a
//! child subreaper that writes slurmd's own record and stops its node's slurmstepds.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Error;

/// State letter and start time of a live process (`None`: no such process).
pub fn state_start(pid: i32) -> Option<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) may hold spaces and parentheses: fields after the last ')'
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    Some((state, fields.get(19)?.parse().ok()?))
}

/// Process group of a live process.
fn pgrp(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) has no memory preconditions; the pid was checked to be ours.
    unsafe { libc::kill(pid, signal) };
}

/// The records of one cluster's processes (`DIR/run/pid`).
pub struct Records {
    pub dir: PathBuf,
}

impl Records {
    /// Remembers `pid` as `name`'s process.
    pub fn record(&self, name: &str, pid: u32) -> Result<(), Error> {
        let start = i32::try_from(pid)
            .ok()
            .and_then(state_start)
            .map_or_else(|| "dead".to_string(), |(_, s)| s.to_string());
        let path = self.dir.join(name);
        fs::write(&path, format!("{pid} {start}\n")).map_err(|e| Error::io(&path, e))
    }

    /// The pid and start time written in `name`'s record.
    fn read(&self, name: &str) -> Option<(i32, Option<u64>)> {
        let text = fs::read_to_string(self.dir.join(name)).ok()?;
        let mut f = text.split_whitespace();
        let pid = f.next()?.parse().ok()?;
        Some((pid, f.next().and_then(|s| s.parse().ok())))
    }

    /// The start time recorded for `name` (`None`: no record, or it died before it was written).
    pub fn start_time(&self, name: &str) -> Option<u64> {
        self.read(name)?.1
    }

    /// `name`'s pid while the recorded process is alive and still the same one.
    pub fn pid(&self, name: &str) -> Option<i32> {
        let (pid, start) = self.read(name)?;
        let (state, now) = state_start(pid)?;
        (state != 'Z' && Some(now) == start).then_some(pid)
    }

    /// The names recorded, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.ends_with(".restart") && !n.contains(".tmp"))
            .collect();
        names.sort();
        names
    }

    /// Signals a recorded process if it is still the one started. A daemon leads its own
    /// session, whose process group holds it and its helpers (slurmctld's slurmscriptd,
    /// install-db's bootstrap mariadbd): the group gets the signal. A node supervisor gets
    /// it alone, it stops its node itself.
    pub fn signal(&self, signal: i32, name: &str) -> bool {
        let Some(pid) = self.pid(name) else {
            return false;
        };
        if pgrp(pid) == Some(pid) && !name.starts_with("nodesup-") {
            kill(-pid, signal);
        } else {
            kill(pid, signal);
        }
        true
    }

    /// TERMs the given records, KILLs what is left after `timeout`, waits until they are
    /// gone; true when one had to be killed.
    pub fn stop(&self, timeout: Duration, names: &[String]) -> bool {
        for n in names {
            self.signal(libc::SIGTERM, n);
        }
        if self.gone_within(timeout, names) {
            return false;
        }
        for n in names {
            if self.pid(n).is_some() {
                eprintln!("cluster: {n} did not stop after {timeout:?}, sending SIGKILL");
                self.signal(libc::SIGKILL, n);
            }
        }
        self.gone_within(Duration::from_secs(5), names);
        true
    }

    fn gone_within(&self, timeout: Duration, names: &[String]) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if names.iter().all(|n| self.pid(n).is_none()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Starts `command` detached (a session of its own, stdin from /dev/null, stdout and stderr
/// appended to `log`) and records it as `name`. The child is returned for the one caller
/// that waits for it (mariadb-install-db); the others drop it: the daemon outlives this
/// process and `down` stops it by its record.
pub fn start_daemon(
    records: &Records,
    name: &str,
    log: &Path,
    command: Command,
) -> Result<Child, Error> {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::io(log, e))?;
    let err = out.try_clone().map_err(|e| Error::io(log, e))?;
    // setsid(1) execs in place: the child of a spawn leads no process group, so it does
    // not fork and the pid stays the daemon's
    let mut setsid = Command::new("setsid");
    setsid
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => setsid.env(k, v),
            None => setsid.env_remove(k),
        };
    }
    let child = setsid
        .spawn()
        .map_err(|e| Error::Setup(format!("cannot start {name}: {e}")))?;
    records.record(name, child.id())?;
    Ok(child)
}
