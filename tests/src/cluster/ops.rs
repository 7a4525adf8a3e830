//! Starting and stopping a cluster, and what runs against one: the commands of the
//! `cluster` program (tests/src/bin/cluster.rs).

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::config;
use super::procs::Records;
use super::slots::slots_dir;
use super::{Error, Layout, State, cgroups, netns};

mod up;

pub use up::up;

/// The signal the `cluster` program's SIGINT/SIGTERM handler got (0: none): `up` stops
/// waiting and takes down what it started.
pub static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// ci/cluster-lib: the script that starts a node's slurmd.
fn lib_dir() -> PathBuf {
    crate::workspace().join("ci/cluster-lib")
}

fn command(prefix: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Whether `program` is in PATH.
fn in_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The records of `layout`'s cluster.
fn records(layout: &Layout) -> Records {
    Records {
        dir: layout.pid_dir(),
    }
}

/// The logs relevant to a record.
fn logs_of(layout: &Layout, record: &str) -> Vec<PathBuf> {
    let names = match record.strip_prefix("nodesup-") {
        Some(n) => vec![
            format!("hook-{n}.log"),
            format!("slurmd-{n}.out"),
            format!("slurmd-{n}.log"),
            format!("nodesup-{n}.out"),
        ],
        None if record == "mariadbd" => vec!["mariadbd.log".into(), "mariadbd.out".into()],
        None if record == "installdb" => vec!["installdb.out".into()],
        None => vec![format!("{record}.out"), format!("{record}.log")],
    };
    names.iter().map(|n| layout.log(n)).collect()
}

/// The last 40 lines of the logs of these records.
fn tails(layout: &Layout, records: &[&str]) -> String {
    let mut text = String::new();
    for path in records.iter().flat_map(|r| logs_of(layout, r)) {
        let Ok(body) = fs::read_to_string(&path) else {
            continue;
        };
        if body.is_empty() {
            continue;
        }
        let lines: Vec<&str> = body.lines().collect();
        text.push_str(&format!("----- tail {} -----\n", path.display()));
        for l in &lines[lines.len().saturating_sub(40)..] {
            text.push_str(l);
            text.push('\n');
        }
    }
    text
}

fn failed(layout: &Layout, msg: &str, records: &[&str]) -> Error {
    Error::Failed(format!("up failed: {msg}\n{}", tails(layout, records)))
}

/// A client program against the cluster (its `DIR/bin` wrapper: SLURM_CONF and the ctl
/// namespace), bounded in time so a hung daemon cannot stall a polling loop.
fn client(layout: &Layout, program: &str, args: &[&str]) -> Option<Output> {
    Command::new("timeout")
        .arg("30")
        .arg(layout.dir.join("bin").join(program))
        .args(args)
        .env("SLURM_CONF", layout.conf())
        .output()
        .ok()
}

fn client_ok(layout: &Layout, program: &str, args: &[&str]) -> bool {
    client(layout, program, args).is_some_and(|o| o.status.success())
}

/// Polls `ready` until it holds, for `timeout`; fails early when a process in `watch`
/// died or a slurmd exited (its supervisor writes `run/slurmd-NODE.exit`).
fn wait_for(
    layout: &Layout,
    timeout: Duration,
    desc: &str,
    watch: &[&str],
    mut ready: impl FnMut() -> bool,
) -> Result<(), Error> {
    let recs = records(layout);
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if INTERRUPTED.load(Ordering::Relaxed) != 0 {
            return Err(Error::Failed("interrupted".into()));
        }
        if let Some(r) = watch.iter().find(|r| recs.pid(r).is_none()) {
            return Err(failed(
                layout,
                &format!("{r} died while waiting for {desc}"),
                &[r],
            ));
        }
        for e in fs::read_dir(layout.dir.join("run"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(node) = name
                .strip_prefix("slurmd-")
                .and_then(|n| n.strip_suffix(".exit"))
            {
                let how = fs::read_to_string(e.path()).unwrap_or_default();
                return Err(failed(
                    layout,
                    &format!("slurmd on {node} {} while waiting for {desc}", how.trim()),
                    &[&format!("nodesup-{node}")],
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(failed(
                layout,
                &format!("timeout ({timeout:?}) waiting for {desc}"),
                watch,
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops what the cluster in `layout` started (idempotent): each node supervisor stops its
/// slurmd and then its slurmstepds and tasks; then the other daemons, the namespaces, the
/// slot.
pub fn down(layout: &Layout, quiet: bool) {
    let recs = records(layout);
    let names = recs.names();
    let of = |prefix: &str| -> Vec<String> {
        names
            .iter()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect()
    };
    let supervisors = of("nodesup-");
    if !supervisors.is_empty() {
        // one that died before (only possible after a SIGKILL) left its slurmstepds behind
        let died = supervisors.iter().any(|n| recs.pid(n).is_none());
        if recs.stop(Duration::from_secs(15), &supervisors) || died {
            netns::sweep_mount_namespaces(layout, &recs);
        }
    }
    // a slurmd whose supervisor vanished
    for n in of("slurmd-") {
        if recs.signal(libc::SIGKILL, &n) {
            eprintln!("cluster: killed orphaned {n}");
        }
    }
    // slurmctld first: it is the heaviest user of the others
    let mut rest: Vec<String> = ["slurmctld", "slurmdbd", "mariadbd", "installdb", "munged"]
        .into_iter()
        .filter(|n| names.iter().any(|m| m == n))
        .map(String::from)
        .collect();
    rest.extend(of("munged-"));
    if !rest.is_empty() {
        recs.stop(Duration::from_secs(10), &rest);
    }
    netns::remove(layout);
    for n in &names {
        let _ = fs::remove_file(recs.dir.join(n));
    }
    for e in fs::read_dir(layout.dir.join("run"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("slurmd-") && name.ends_with(".exit") {
            let _ = fs::remove_file(e.path());
        }
    }
    if let Some(state) = State::load(layout) {
        cgroups::remove_job_cgroups(Path::new(cgroups::CGROUP_ROOT), &state.slot.job_ids());
        cgroups::remove_v2_root(&cgroups::v2_root(state.slot.0));
        state.slot.free(&slots_dir(), &layout.dir);
    }
    if !quiet {
        println!("cluster down");
    }
}

/// `export` lines that point a shell at the cluster: SLURM_CONF, and the client wrappers
/// first in PATH (once, however often they are eval'ed).
pub fn env_lines(layout: &Layout, path: &str) -> String {
    let bin = layout.dir.join("bin");
    let path: Vec<String> = std::env::split_paths(path)
        .filter(|p| *p != bin)
        .map(|p| p.display().to_string())
        .collect();
    format!(
        "export SLURM_CONF={}\nexport PATH={}\n",
        config::sh_quote(&layout.conf().display().to_string()),
        config::sh_quote(&format!("{}:{}", bin.display(), path.join(":")))
    )
}

/// A program that is no wrapper in `DIR/bin` (senergy, a server beside the cluster),
/// where the clients run: the ctl namespace, SLURM_CONF set.
pub fn client_command(layout: &Layout, program: &[OsString]) -> Result<Command, Error> {
    let netns = State::load(layout).is_some_and(|s| s.netns);
    let (first, rest) = program
        .split_first()
        .ok_or_else(|| Error::Usage("client: no command".into()))?;
    let mut c = command(&netns::ctl_prefix(layout, netns), first);
    c.args(rest).env("SLURM_CONF", layout.conf());
    Ok(c)
}

/// A program in node `node`'s namespaces (mount, host name, network), as its slurmd:
/// it sees the node hook's mounts.
pub fn node_command(layout: &Layout, node: &str, program: &[OsString]) -> Result<Command, Error> {
    let pid = records(layout)
        .pid(&format!("slurmd-{node}"))
        .ok_or_else(|| Error::Usage(format!("slurmd of {node} is not running")))?;
    if program.is_empty() {
        return Err(Error::Usage("node-exec: no command".into()));
    }
    let mut c = Command::new("nsenter");
    c.args(["-t", &pid.to_string(), "--mount", "--uts", "--net", "--"])
        .args(program)
        .env("SLURM_CONF", layout.conf());
    Ok(c)
}

/// `scontrol reconfigure`.
pub fn reconfigure(layout: &Layout) -> Result<(), Error> {
    let out = client(layout, "scontrol", &["reconfigure"])
        .ok_or_else(|| Error::Setup("scontrol did not run".into()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Failed(format!(
            "scontrol reconfigure: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A node's `State` and `SlurmdStartTime` (epoch seconds).
fn node_state(layout: &Layout, node: &str) -> Option<(String, u64)> {
    let out = Command::new("timeout")
        .arg("30")
        .arg(layout.dir.join("bin/scontrol"))
        .args(["-o", "show", "node", node])
        .env("SLURM_CONF", layout.conf())
        .env("SLURM_TIME_FORMAT", "%s")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(name).map(str::to_string))
    };
    Some((
        field("State=")?,
        field("SlurmdStartTime=")?.parse().unwrap_or(0),
    ))
}

/// Restarts one slurmd and keeps its slurmstepds: its supervisor signals slurmd alone with
/// `signal` (TERM, or KILL as a crash), starts it again `down_secs` later through
/// node-start.sh (a new mount namespace, the node hook again), and this returns once the
/// node responds with its new slurmd. Returns the new slurmd's pid.
pub fn restart_slurmd(
    layout: &Layout,
    node: &str,
    signal: &str,
    down_secs: f64,
    timeout: Duration,
) -> Result<i32, Error> {
    if !matches!(signal, "TERM" | "KILL") {
        return Err(Error::Usage(format!("signal {signal}: TERM or KILL")));
    }
    let recs = records(layout);
    let sup = recs
        .pid(&format!("nodesup-{node}"))
        .ok_or_else(|| Error::Usage(format!("no running supervisor for node {node}")))?;
    let slurmd = format!("slurmd-{node}");
    let old = recs.pid(&slurmd);
    // "responding again" is judged by SlurmdStartTime >= t0 (1 s resolution): t0 must be
    // strictly later than the current slurmd's start time
    let started = node_state(layout, node).map_or(0, |(_, t)| t);
    while now_secs() <= started {
        std::thread::sleep(Duration::from_millis(100));
    }
    let t0 = now_secs();
    let exit = layout.exit_file(node);
    let _ = fs::remove_file(&exit);
    let plan = recs.dir.join(format!("{slurmd}.restart"));
    fs::write(&plan, format!("{signal} {down_secs}\n")).map_err(|e| Error::io(&plan, e))?;
    // SAFETY: kill(2) has no memory preconditions; the supervisor's record was checked.
    unsafe { libc::kill(sup, libc::SIGUSR1) };
    let deadline = Instant::now() + timeout + Duration::from_secs_f64(down_secs.max(0.0));
    let nodesup = format!("nodesup-{node}");
    let mut last = None;
    loop {
        if let Ok(how) = fs::read_to_string(&exit) {
            return Err(Error::Failed(format!(
                "restarted slurmd on {node} {}\n{}",
                how.trim(),
                tails(layout, &[&nodesup])
            )));
        }
        if let Some(new) = recs.pid(&slurmd).filter(|p| Some(*p) != old) {
            last = node_state(layout, node);
            // responding again: registered after the restart and not flagged
            if let Some((state, start)) = &last
                && !["NOT_RESPONDING", "DOWN", "UNKNOWN"]
                    .iter()
                    .any(|f| state.contains(f))
                && *start >= t0
            {
                return Ok(new);
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::Failed(format!(
                "timeout waiting for {node} to respond after restart (state: {last:?})\n{}",
                tails(layout, &[&nodesup])
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The recorded processes, whether each runs, and the cluster's network namespaces.
pub fn status(layout: &Layout) -> String {
    let recs = records(layout);
    let mut text = String::new();
    for n in recs.names() {
        match recs.pid(&n) {
            Some(pid) => text.push_str(&format!("{n}: running (pid {pid})\n")),
            None => text.push_str(&format!("{n}: not running\n")),
        }
    }
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.starts_with(&format!("{}-", layout.ns_prefix)) {
                text.push_str(l);
                text.push('\n');
            }
        }
    }
    text
}
