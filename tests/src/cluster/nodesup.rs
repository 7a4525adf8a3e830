//! The per-node supervisor (`cluster nodesup`, one per slurmd).
//!
//! Why it exists: slurmd launches every slurmstepd through a setsid() and a double fork,
//! so slurmstepds (and the job tasks under them) end up in sessions of their own,
//! re-parented away from slurmd. Without help there is no reliable way to find them again
//! except by name, which could hit processes of some other Slurm on the machine. The
//! supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): every orphan of its subtree,
//! slurmstepds and leftover job tasks, is re-parented to it, so stopping node nK means
//! stopping every child of this process.
//!
//! It also restarts slurmd for the tests: on SIGUSR1 it stops slurmd alone (slurmstepds
//! keep running as its children) and launches the same command line again, which makes a
//! fresh private mount namespace and runs the node hook again. `PIDFILE.restart` may say
//! "SIGNAL DOWN_SECS" (e.g. "KILL 20": slurmd killed at once, started again 20 s later);
//! without it, TERM and at once.
//!
//! usage: cluster nodesup PIDFILE EXITFILE LOGFILE -- CMD [ARGS...]
//!   PIDFILE   written (atomically) with `"<slurmd pid> <starttime>"` on every launch
//!   EXITFILE  written with slurmd's wait status when slurmd dies on its own
//!   LOGFILE   slurmd's stdout and stderr (appended)
//! Signals: SIGTERM/SIGINT stop the node (TERM, then KILL after NODESUP_GRACE seconds,
//! default 3, for every child until none is left); SIGUSR1 restarts slurmd.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Error;
use super::procs::state_start;

static STOP: AtomicBool = AtomicBool::new(false);
static RESTART: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_restart(_: libc::c_int) {
    RESTART.store(true, Ordering::Relaxed);
}

fn log(msg: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    eprintln!(
        "{:02}:{:02}:{:02} nodesup: {msg}",
        now / 3600 % 24,
        now / 60 % 60,
        now % 60
    );
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) has no memory preconditions; pid is a child of this process.
    unsafe { libc::kill(pid, signal) };
}

/// The direct children of this process (re-parented orphans included).
fn children() -> Vec<i32> {
    let me = std::process::id();
    let mut kids = Vec::new();
    for task in fs::read_dir(format!("/proc/{me}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            kids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    kids.sort_unstable();
    kids.dedup();
    kids
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = PathBuf::from(format!("{}.tmp{}", path.display(), std::process::id()));
    if fs::write(&tmp, text)
        .and_then(|()| fs::rename(&tmp, path))
        .is_err()
    {
        log(&format!("cannot write {}", path.display()));
    }
}

/// A wait status in words.
fn describe(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status}")
    }
}

struct Node {
    pidfile: PathBuf,
    exitfile: PathBuf,
    logfile: PathBuf,
    cmd: Vec<OsString>,
    /// The current slurmd, `None` when it does not run.
    slurmd: Option<i32>,
    /// slurmd was stopped on purpose and will be started again.
    restarting: bool,
}

impl Node {
    fn spawn(&mut self) {
        let _ = fs::remove_file(&self.exitfile);
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.logfile);
        let (Some((program, args)), Ok(out)) = (self.cmd.split_first(), out) else {
            log("no command or no log file");
            return;
        };
        let err = out.try_clone().map_or(Stdio::null(), Stdio::from);
        // the handlers of this process are reset by exec
        match Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
        {
            Ok(child) => {
                let pid = child.id();
                // reaped by waitpid(-1) in `reap`, as every other child is
                drop(child);
                let start = i32::try_from(pid)
                    .ok()
                    .and_then(state_start)
                    .map_or(0, |(_, s)| s);
                write_atomic(&self.pidfile, &format!("{pid} {start}\n"));
                self.slurmd = i32::try_from(pid).ok();
                self.restarting = false;
                log(&format!("started slurmd pid {pid}"));
            }
            Err(e) => {
                log(&format!("exec {} failed: {e}", program.to_string_lossy()));
                write_atomic(&self.exitfile, "could not be started\n");
            }
        }
    }

    /// Reaps every exited child; false when there is no child at all.
    fn reap(&mut self) -> bool {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid pointer to an int.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid < 0 {
                return false;
            }
            if pid == 0 {
                return true;
            }
            if Some(pid) == self.slurmd {
                self.slurmd = None;
                let desc = describe(status);
                log(&format!("slurmd {pid} {desc}"));
                if !STOP.load(Ordering::Relaxed) && !self.restarting {
                    write_atomic(&self.exitfile, &format!("{desc}\n"));
                }
            }
        }
    }

    /// Signals slurmd alone (its slurmstepds keep running), KILL after `timeout`.
    fn stop_slurmd(&mut self, timeout: Duration, signal: i32) {
        let Some(pid) = self.slurmd else {
            return;
        };
        self.restarting = true;
        kill(pid, signal);
        let mut deadline = Some(Instant::now() + timeout);
        while self.slurmd == Some(pid) {
            self.reap();
            if self.slurmd != Some(pid) {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                log(&format!("slurmd {pid} ignored SIGTERM, sending SIGKILL"));
                kill(pid, libc::SIGKILL);
                deadline = None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops slurmd first, then every remaining child (slurmstepds, tasks).
    fn stop_all(&mut self, grace: Duration) {
        if let Some(pid) = self.slurmd {
            kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        let mut termed = Vec::new();
        while self.reap() {
            let kids = children();
            if kids.is_empty() {
                break;
            }
            let late = Instant::now() > deadline;
            for k in kids {
                if late || !termed.contains(&k) {
                    kill(k, if late { libc::SIGKILL } else { libc::SIGTERM });
                    termed.push(k);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        log("all children gone");
    }
}

/// The signal and the seconds down of the restart asked for (see the module's doc).
fn restart_plan(pidfile: &Path) -> (i32, f64) {
    let path = PathBuf::from(format!("{}.restart", pidfile.display()));
    let Ok(text) = fs::read_to_string(&path) else {
        return (libc::SIGTERM, 0.0);
    };
    let _ = fs::remove_file(&path);
    let mut f = text.split_whitespace();
    let signal = match f.next() {
        Some("KILL") => libc::SIGKILL,
        _ => libc::SIGTERM,
    };
    (signal, f.next().and_then(|s| s.parse().ok()).unwrap_or(0.0))
}

/// `cluster nodesup ARGS`: supervises one node until told to stop.
pub fn run(args: &[OsString]) -> Result<(), Error> {
    let usage = || Error::Usage("usage: cluster nodesup PIDFILE EXITFILE LOGFILE -- CMD...".into());
    if args.len() < 5 || args[3] != "--" {
        return Err(usage());
    }
    let grace = std::env::var("NODESUP_GRACE")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(3.0);
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(Error::Setup(format!(
            "prctl(PR_SET_CHILD_SUBREAPER): {}",
            std::io::Error::last_os_error()
        )));
    }
    for (signal, handler) in [
        (libc::SIGTERM, on_stop as extern "C" fn(libc::c_int)),
        (libc::SIGINT, on_stop),
        (libc::SIGUSR1, on_restart),
    ] {
        // SAFETY: the handlers only store to atomics, which is async-signal-safe.
        unsafe { libc::signal(signal, handler as *const () as libc::sighandler_t) };
    }
    // SAFETY: ignoring a signal has no preconditions.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    let mut node = Node {
        pidfile: args[0].clone().into(),
        exitfile: args[1].clone().into(),
        logfile: args[2].clone().into(),
        cmd: args[4..].to_vec(),
        slurmd: None,
        restarting: false,
    };
    node.spawn();
    while !STOP.load(Ordering::Relaxed) {
        if RESTART.swap(false, Ordering::Relaxed) {
            let (signal, down) = restart_plan(&node.pidfile);
            log(&format!(
                "restart requested: signal {signal}, {down} s down"
            ));
            node.stop_slurmd(Duration::from_secs(10), signal);
            let until = Instant::now() + Duration::from_secs_f64(down.max(0.0));
            while Instant::now() < until && !STOP.load(Ordering::Relaxed) {
                node.reap();
                std::thread::sleep(Duration::from_millis(100));
            }
            if !STOP.load(Ordering::Relaxed) {
                node.spawn();
            }
        }
        node.reap();
        // polling keeps signal handling trivial; 0.1 s is plenty for tests
        std::thread::sleep(Duration::from_millis(100));
    }
    log("stop requested");
    node.stop_all(Duration::from_secs_f64(grace));
    Ok(())
}
