//! Test support shared by the loader, cluster and benchmark tests (built once, as this
//! crate's library): the simulators, the built plugins, private Slurm clusters.

pub mod bmc;
pub mod check;
pub mod cluster;
#[path = "../fakegpu/harness.rs"]
pub mod fakegpu;
pub mod gpu_cluster;
pub mod hardware_time;
pub mod hwmonsim;
pub mod inbox;
pub mod influxdb;
pub mod pmsim;
pub mod prometheus;
pub mod redfish;
pub mod shared_node;
pub mod stepds;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One of this crate's binaries (`raplsim`, `energy-driver`, ...), built by cargo beside the
/// test binaries' `deps/` directory before any integration test runs.
pub fn bin(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test
        .parent()
        .and_then(Path::parent)
        .expect("a test binary lives in <target>/<profile>/deps");
    let built = profile_dir.join(name);
    assert!(
        built.exists(),
        "{} is missing: cargo builds it for the integration tests (cargo test -p energy-tests)",
        built.display()
    );
    built
}

/// The built `senergy` (a binary of another package of the workspace, beside the tests').
pub fn senergy() -> PathBuf {
    let built = target_dir().join("senergy");
    assert!(
        built.exists(),
        "{} is missing: build the workspace first (cargo build --release --workspace)",
        built.display()
    );
    built
}

/// These tests mount over /dev/cpu, /proc/cpuinfo and /sys inside private namespaces and
/// run Slurm daemons: they need root. Anywhere else they fail loudly, unless
/// ENERGY_TESTS_ALLOW_SKIP=1 says skipping is intended (then they print that they skip).
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        return true;
    }
    if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("SKIPPED {test}: needs root (ENERGY_TESTS_ALLOW_SKIP=1)");
        return false;
    }
    panic!(
        "{test} needs root (mount namespaces, Slurm daemons); run as root or set ENERGY_TESTS_ALLOW_SKIP=1 to skip"
    );
}

/// The opening of every test that needs root: a private temporary directory (removed when
/// dropped), or `None` when the test is skipped (see [`root_or_skip`]).
pub fn root_test_dir(test: &str) -> Option<tempfile::TempDir> {
    root_or_skip(test).then(|| tempfile::tempdir().expect("a temporary directory"))
}

/// The plugins as Slurm will load them: `acct_gather_energy_rust_<kind>.so` in a PluginDir.
pub fn plugin_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("plugins");
    fs::create_dir_all(&dir).expect("mkdir plugins");
    // the Variorum sampler lives beside its plugin
    let sampler = "acct_gather_energy_rust_variorum_sampler";
    fs::copy(target_dir().join(sampler), dir.join(sampler)).expect("copy the variorum sampler");
    for (name, built) in built_plugins() {
        fs::copy(&built, dir.join(format!("{name}.so"))).expect("copy plugin");
    }
    dir
}

/// Where cargo put the workspace's binaries (this build's profile and target dir).
pub fn target_dir() -> PathBuf {
    bin("energy-driver")
        .parent()
        .expect("target dir")
        .to_path_buf()
}

/// Every plugin the workspace builds, found through `cargo metadata` (each `cdylib`, which
/// must be an `acct_gather_energy` plugin), so that a new one needs no list updated: its
/// library name (`acct_gather_energy_rust_rapl`, the file name Slurm looks for, without
/// `.so`) and the built `lib<name>.so`.
pub fn built_plugins() -> Vec<(String, PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(workspace().join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata");
    let mut names: Vec<String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter(|t| {
            t["crate_types"]
                .as_array()
                .is_some_and(|types| types.iter().any(|c| c == "cdylib"))
        })
        .filter_map(|t| t["name"].as_str().map(|n| n.replace('-', "_")))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no cdylib in the workspace");
    names
        .into_iter()
        .map(|name| {
            assert!(
                name.starts_with("acct_gather_energy_"),
                "{name} is a cdylib but not an acct_gather_energy plugin: the tests do not \
                 know how to load it"
            );
            let built = target_dir().join(format!("lib{name}.so"));
            assert!(
                built.exists(),
                "{} is missing: build the plugins first (cargo build --release --workspace; ci/test.sh does)",
                built.display()
            );
            (name, built)
        })
        .collect()
}

/// Two Intel server sockets (Skylake-SP, model 85), whose DRAM counts in its own
/// 15.3 uJ unit whatever the package unit (raplsim's options).
pub const INTEL_SERVER: &str = "--vendor intel --packages 2 --cpus 2 --esu 14 --model 85";

/// A running `raplsim`; killed on drop.
pub struct Sim {
    pub dir: PathBuf,
    child: Child,
}

impl Sim {
    /// `args`: raplsim's options, e.g. [`INTEL_SERVER`].
    pub fn start(dir: &Path, args: &str) -> Sim {
        crate::hardware_time::hardware_dir(dir);
        let child = Command::new(bin("raplsim"))
            .arg("run")
            .arg(dir)
            .args(args.split_whitespace())
            .spawn()
            .expect("start raplsim");
        let sim = Sim {
            dir: dir.to_path_buf(),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("truth").exists() {
            assert!(Instant::now() < deadline, "raplsim did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        sim
    }

    pub fn set(&self, assignments: &[&str]) {
        let status = Command::new(bin("raplsim"))
            .arg("set")
            .arg(&self.dir)
            .args(assignments)
            .status()
            .expect("raplsim set");
        assert!(status.success());
    }

    pub fn glitch(&self, what: &str, counter: &str, secs: f64) {
        let status = Command::new(bin("raplsim"))
            .args(["glitch"])
            .arg(&self.dir)
            .args([what, counter, &secs.to_string()])
            .status()
            .expect("raplsim glitch");
        assert!(status.success());
    }

    /// The counters advance in steps every `ms` milliseconds from now on (RAPL's are about
    /// 1 ms, pm_counters' 100 ms).
    pub fn tick(&self, ms: u32) {
        let status = Command::new(bin("raplsim"))
            .arg("tick")
            .arg(&self.dir)
            .arg(ms.to_string())
            .status()
            .expect("raplsim tick");
        assert!(status.success());
    }

    /// True joules since the simulator started, over all counters.
    pub fn truth(&self) -> f64 {
        let text = fs::read_to_string(self.dir.join("truth")).expect("truth");
        text.split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .expect("truth value")
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The plugin directory of the Slurm under test, as the test clusters pick it:
/// `SLURM_PLUGIN_DIR`, else `SLURM_PREFIX/lib/slurm`, else Debian's for this architecture.
pub fn slurm_plugin_dir() -> PathBuf {
    match (
        std::env::var_os("SLURM_PLUGIN_DIR"),
        std::env::var_os("SLURM_PREFIX"),
    ) {
        (Some(dir), _) if !dir.is_empty() => PathBuf::from(dir),
        (_, Some(prefix)) if !prefix.is_empty() => Path::new(&prefix).join("lib/slurm"),
        _ => PathBuf::from(env!("ENERGY_TESTS_DEBIAN_SLURM_DIR")),
    }
}

/// A minimal slurm.conf for the framework (no daemons) whose PluginDir has the built
/// plugins, and acct_gather.conf beside it, in `tmp`.
pub fn slurm_conf(tmp: &Path, energy_type: &str, acct_gather: &str) -> PathBuf {
    let conf = tmp.join("slurm.conf");
    // where a driver running as slurmd keeps the node's energy ledger, and one running as
    // slurmstepd reads it
    let spool = tmp.join("spool");
    fs::create_dir_all(&spool).expect("spool dir");
    fs::write(
        &conf,
        format!(
            "ClusterName=loader\nSlurmctldHost=localhost\n\
             PluginDir={}:{}\nSlurmdSpoolDir={}\n\
             AcctGatherEnergyType={energy_type}\nNodeName=localhost CPUs=1\n\
             PartitionName=debug Nodes=ALL\n",
            slurm_plugin_dir().display(),
            plugin_dir(tmp).display(),
            spool.display()
        ),
    )
    .expect("slurm.conf");
    fs::write(tmp.join("acct_gather.conf"), acct_gather).expect("acct_gather.conf");
    conf
}

/// Runs the driver as `program` with its commands (`cmds`, whitespace-separated); inside a
/// private mount namespace showing `sim`'s hardware when given. Returns once the driver has
/// loaded and configured the plugin (or has exited, or after 30 s), so that what a test
/// does to the hardware next happens while the plugin is running, however long the
/// release's start-up takes.
pub fn driver(sim: Option<&Sim>, conf: &Path, program: &str, cmds: &str) -> Child {
    driver_env(sim, conf, program, cmds, &[])
}

/// [`driver`] with these environment variables set for the daemon.
pub fn driver_env(
    sim: Option<&Sim>,
    conf: &Path,
    program: &str,
    cmds: &str,
    env: &[(&str, &Path)],
) -> Child {
    let mut command = match sim {
        Some(sim) => {
            let mut c = Command::new("unshare");
            c.args(["-m", "--propagation", "private", "sh", "-c"])
                .arg(r#"sim=$1; shift; "$0" "$sim" && exec "$@""#)
                .arg(workspace().join("tests/fakehw/bind-rapl.sh"))
                .arg(&sim.dir)
                .arg(bin("energy-driver"));
            c
        }
        None => Command::new(bin("energy-driver")),
    };
    // a file of this driver's own beside the conf: several drivers may share a directory
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let ready = conf.with_file_name(format!(
        "energy-driver-ready.{}.{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_file(&ready);
    let mut child = command
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .env("ENERGY_DRIVER_READY", &ready)
        .arg(conf)
        .arg(program)
        .args(cmds.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start energy-driver");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() && Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = fs::remove_file(&ready);
    child
}

/// How often [`wait_until`] looks again: a condition the tests wait on (a file written, a
/// job in accounting, a sample published) changes at most a few times a second, and a look
/// is a file read or a client call.
const POLL: Duration = Duration::from_millis(50);

/// Polls `look` until it gives a value, for `timeout` at most; fails naming `what` it
/// waited for. The bounded wait the tests use where a fixed sleep would only let something
/// settle: it ends as soon as the thing happened, and a thing that never happens fails
/// the test instead of letting it measure too early.
pub fn wait_until<T>(what: &str, timeout: Duration, look: impl FnMut() -> Option<T>) -> T {
    poll_until(timeout, look).unwrap_or_else(|| panic!("{what}: not seen within {timeout:?}"))
}

/// [`wait_until`] without the failure: `None` when `look` gave nothing within `timeout`.
pub fn poll_until<T>(timeout: Duration, mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = look() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

pub fn finish(child: Child) -> (String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("driver output");
    let (out, err) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert!(status.success(), "driver failed: {status}\n{out}\n{err}");
    (out, err)
}

/// The most a plugin call (`update`, `get_sum`) may take, in µs, in the tests that freeze,
/// hang or refuse the hardware behind it. A call that waited on the hardware would take the
/// hang (seconds) or the source's timeout (IPMI's 10 s, Redfish's 5 s); a call that did not
/// can still be descheduled on a loaded CI machine (1.2 ms seen on 2 cores under CI's
/// parallel lanes, where this bound had been 1 ms). The benchmarks print the real figure.
pub const CALL_NEVER_WAITS_US: u64 = 100_000;

/// The `key=value` fields of the `n`th output line starting with `label`.
pub fn field(out: &str, label: &str, n: usize, key: &str) -> String {
    let line = out
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(label))
        .nth(n)
        .unwrap_or_else(|| panic!("no line {n} for {label} in:\n{out}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .to_string()
}

pub fn joules(out: &str, label: &str, n: usize) -> f64 {
    let v = field(out, label, n, "consumed");
    v.parse()
        .unwrap_or_else(|_| panic!("{label} #{n} consumed={v} is not a number:\n{out}"))
}

/// A simulator's power schedule (`power.log`: `"<unix ns> <watts>"` per change).
pub fn power_schedule(log: &Path) -> Vec<(f64, f64)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (t, w) = l.split_once(' ')?;
            Some((t.parse().ok()?, w.trim().parse().ok()?))
        })
        .collect()
}

/// True joules from `start_ns` to `end_ns` (unix ns) under a schedule of `(unix ns, watts)`
/// changes, each holding until the next.
pub fn joules_between(schedule: &[(f64, f64)], start_ns: f64, end_ns: f64) -> f64 {
    let mut joules = 0.0;
    for (i, &(t, w)) in schedule.iter().enumerate() {
        let next = schedule.get(i + 1).map_or(f64::INFINITY, |&(t, _)| t);
        let (from, to) = (t.max(start_ns), next.min(end_ns));
        if to > from {
            joules += w * (to - from) / 1e9;
        }
    }
    joules
}

/// The default-settings scenario: a step that runs 20 s at the power set before it, then
/// `set_350` and 20 s more; it writes its start and end (unix ns) into `marks`.
pub fn power_step_script(marks: &Path, set_350: &str) -> String {
    let m = marks.display();
    format!(
        "#!/bin/sh\nsrun -n1 sh -c 'date +%s%N > {m}/start; sleep 20; {set_350}; sleep 20; \
         date +%s%N > {m}/end'\n"
    )
}

/// True joules of the step `power_step_script` ran, from its marks and the power log.
pub fn power_step_truth(marks: &Path, power_log: &Path) -> f64 {
    let mark = |name: &str| -> f64 {
        let text = fs::read_to_string(marks.join(name)).expect("the step wrote its marks");
        text.trim().parse().expect("a unix time in ns")
    };
    joules_between(&power_schedule(power_log), mark("start"), mark("end"))
}

/// Waits until the schedule, after its first `skip` changes, sets `watts`, then for
/// `settle` so the plugin has sampled the new level. Fault tests start their fault only
/// then: a gap is bridged between the samples before and after it, so a fault that began
/// at a power step would (rightly) be bridged at the mean of both levels, not the truth.
pub fn wait_for_power(log: &Path, skip: usize, watts: u32, settle: Duration) {
    let until = Instant::now() + Duration::from_secs(60);
    while !power_schedule(log)
        .iter()
        .skip(skip)
        .any(|&(_, w)| w == f64::from(watts))
    {
        assert!(Instant::now() < until, "the job never set {watts} W");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(settle);
}

/// How far the trapezoid of a power polled every `period` s (plus the request's time) can
/// be from the truth, as a fraction of the energy of a schedule of `levels` W held `secs`
/// each, from 0 W and back to 0 W: an edge from `a` to `b` W between two polls costs up to
/// |b - a| p / 2, and the edges' signs need not cancel (polls drift against the levels:
/// -78 J of 3 426 J, -2.3%, with every edge traced); at the final fall to 0 W the energy
/// extrapolated at the last power (up to its watts x p / 2 more) is kept. A counter is
/// exact and is held to a tighter bound.
pub fn power_sampling_bound(levels: &[u32], secs: f64, period: f64) -> f64 {
    let mut edges = vec![0];
    edges.extend(levels);
    edges.push(0);
    let swing: u32 = edges.windows(2).map(|w| w[0].abs_diff(w[1])).sum();
    let last = levels.last().copied().unwrap_or(0);
    let energy: f64 = levels.iter().map(|&w| f64::from(w) * secs).sum();
    f64::from(swing + last) * period / 2.0 / energy
}

/// What the plugins said in `log`, on its lines that contain `prefix` (a step's log prefix
/// `[job.step]`, or "" for all), when slurmd did not answer a step's ring: for each such
/// read, the plugin (`rust_rapl`) and how old the ledger sample its figure is as of was.
pub fn unanswered_rings(log: &str, prefix: &str) -> Vec<(String, f64)> {
    log.lines()
        .filter(|l| l.contains(prefix) && l.contains("slurmd did not answer"))
        .filter_map(|l| {
            let plugin = l.split("acct_gather_energy/").nth(1)?.split(':').next()?;
            let age = l
                .rsplit(", ")
                .next()?
                .strip_suffix(" s ago")?
                .parse()
                .ok()?;
            Some((plugin.to_string(), age))
        })
        .collect()
}

pub fn assert_close(what: &str, measured: f64, truth: f64, relative: f64) {
    // Slurm carries whole joules: allow their rounding on top of the relative error.
    let error = (measured - truth).abs();
    println!(
        "{what}: measured {measured:.1} J, true {truth:.3} J, error {:.4}%",
        100.0 * error / truth.max(1e-9)
    );
    assert!(
        error <= truth * relative + 1.0,
        "{what}: measured {measured} J vs true {truth:.3} J (allowed {:.3}%)",
        relative * 100.0
    );
}

/// A power within `relative` of the truth (no joule's rounding allowed, as
/// [`assert_close`] allows).
pub fn assert_watts(what: &str, measured: f64, truth: f64, relative: f64) {
    println!(
        "{what}: {measured:.1} W, true {truth:.1} W ({:+.2}%)",
        100.0 * (measured - truth) / truth
    );
    assert!(
        (measured - truth).abs() <= truth * relative,
        "{what}: {measured} W vs true {truth} W (allowed {:.1}%)",
        relative * 100.0
    );
}

/// The Epilog that runs the shipped `conf/epilog.senergy` with the senergy built here,
/// written in `dir`.
pub fn shipped_epilog(dir: &Path) -> PathBuf {
    let epilog = dir.join("epilog.sh");
    let shipped = workspace().join("conf/epilog.senergy");
    fs::write(
        &epilog,
        format!(
            "#!/bin/sh\nSENERGY={} exec {}\n",
            senergy().display(),
            shipped.display()
        ),
    )
    .expect("epilog");
    fs::set_permissions(&epilog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("epilog mode");
    epilog
}

/// A count from the environment variable `name`, else `default` (a benchmark's size).
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
