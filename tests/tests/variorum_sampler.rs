//! The rust_variorum sampler as a process: its protocol for each Variorum generation
//! (against the fake libvariorum.so of tests/fakevariorum), its isolation from what the
//! library prints, and its lifetime (it dies with its parent and when nobody reads it).
//!
//! The sampler is taken from the same target directory as the energy-driver, so build
//! the workspace first: `cargo build --release --workspace` (ci/test.sh does) or, for a
//! debug run, `cargo build --workspace`. The plugin-side tests (`VariorumSensor::connect`,
//! `VariorumSensor`'s `poll`, every misbehaviour) are in plugins/variorum-sampler/tests/.

#[path = "../fakevariorum/harness.rs"]
mod fakevariorum;

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fakevariorum::{FakeLib, Generation, parent_of, wait_dead};

fn sampler() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_energy-driver"))
        .parent()
        .expect("target dir")
        .join("acct_gather_energy_rust_variorum_sampler");
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --release --workspace; \
         ci/test.sh does)",
        path.display()
    );
    path
}

fn spawn(library: &str, period: &str, parent: Option<u32>) -> Child {
    let mut command = Command::new(sampler());
    command
        .args(["--library", library, "--period", period, "--result-fd", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(pid) = parent {
        command.args(["--parent", &pid.to_string()]);
    }
    command.spawn().expect("start the sampler")
}

/// Reads lines on a thread, so that a silent sampler fails the test instead of hanging it.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn new(out: ChildStdout) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    fn next(&self) -> String {
        self.0
            .recv_timeout(Duration::from_secs(10))
            .expect("a line from the sampler within 10 s")
    }
}

fn finish(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// JSON string escaping as the sampler writes it (serde_json): enough for the key names
/// and host names checked here.
fn escaped(s: &str) -> String {
    s.replace('"', "\\\"")
}

#[test]
fn every_generation_speaks_the_protocol() {
    for generation in Generation::ALL {
        let Some(fake) = FakeLib::new("every_generation_speaks_the_protocol", generation) else {
            continue;
        };
        fake.set_power("host=lassen27 node=384.0 cpu0=85.0 mem0=23.0 gpu0=66.0 cpu1=77.0");
        let mut child = spawn(&fake.library(), "0.1", Some(std::process::id()));
        let lines = Lines::new(child.stdout.take().expect("stdout"));
        let ready = lines.next();
        assert!(ready.contains("\"ready\":true"), "{ready}");
        assert!(
            ready.contains(&format!("\"api\":\"{}\"", generation.api())),
            "{generation:?}: {ready}"
        );
        let node_key = if generation == Generation::V040 {
            "\"power_node\""
        } else {
            "\"power_node_watts\""
        };
        for _ in 0..3 {
            let line = lines.next();
            assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
            assert!(line.contains("\"ok\":true"), "{generation:?}: {line}");
            assert!(line.contains(&escaped(node_key)), "{generation:?}: {line}");
            assert!(
                line.contains(&escaped("\"lassen27\"")),
                "{generation:?}: {line}"
            );
        }
        finish(child);
    }
}

/// Variorum prints on stdout (and VARIORUM_LOG=1 traces there): the fake prints junk,
/// including lines that would pass for samples, and none of it reaches the pipe.
#[test]
fn library_output_never_reaches_the_pipe() {
    for generation in Generation::ALL {
        let Some(fake) = FakeLib::new("library_output_never_reaches_the_pipe", generation) else {
            continue;
        };
        fake.set_power("node=200.0");
        fake.set_mode("noise");
        let mut child = spawn(&fake.library(), "0.05", None);
        let lines = Lines::new(child.stdout.take().expect("stdout"));
        let ready = lines.next();
        assert!(ready.contains("\"ready\":true"), "{generation:?}: {ready}");
        let node_key = if generation == Generation::V040 {
            "power_node"
        } else {
            "power_node_watts"
        };
        for _ in 0..5 {
            let line = lines.next();
            let sample: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(sample["ok"], true, "{generation:?}: {line}");
            let json = sample["json"].as_str().unwrap_or_else(|| panic!("{line}"));
            let report: serde_json::Value =
                serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line}"));
            // the fake's junk claims 9999 W for host "x"; the real answer is 200 W
            assert_eq!(
                node_watts(&report, node_key),
                Some(200.0),
                "{generation:?}: {line}"
            );
        }
        finish(child);
    }
}

/// The node figure wherever a generation puts it (0.8.0 nests it under the hostname).
fn node_watts(report: &serde_json::Value, key: &str) -> Option<f64> {
    match report {
        serde_json::Value::Object(map) => map
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .or_else(|| map.values().find_map(|v| node_watts(v, key))),
        _ => None,
    }
}

#[test]
fn failures_are_reported_on_the_pipe() {
    let Some(fake) = FakeLib::new("failures_are_reported_on_the_pipe", Generation::V080) else {
        return;
    };
    let missing = format!("{}/none/libvariorum.so", fake.dir.path().display());
    let mut child = spawn(&missing, "1", None);
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(1));
    assert!(
        out.contains("\"ok\":false") && out.contains("cannot load"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");

    fake.set_mode("error");
    fake.set_power("node=1.0");
    let child = spawn(&fake.library(), "1", None);
    let output = child.wait_with_output().expect("wait");
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1));
    assert!(out.contains("variorum_get_power_json returned -1"), "{out}");
    // what the library printed is quoted
    assert!(
        out.contains("library output: _ERROR_VARIORUM, Feature not yet implemented"),
        "{out}"
    );

    let output = Command::new(sampler())
        .args(["--period", "soon"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stdout).contains("\"ok\":false"));
}

/// A crashing Variorum kills only the sampler, and leaves no core file behind (one per
/// restart would fill slurmd's working directory).
#[test]
fn a_crash_leaves_no_core_file() {
    let Some(fake) = FakeLib::new("a_crash_leaves_no_core_file", Generation::V070) else {
        return;
    };
    fake.set_mode("crash");
    let cwd = tempfile::tempdir().expect("cwd");
    let output = Command::new(sampler())
        .args(["--library", &fake.library(), "--period", "1"])
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGSEGV),
        "{:?}",
        output.status
    );
    assert!(output.stdout.is_empty());
    let left: Vec<_> = fs::read_dir(cwd.path()).expect("cwd").collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Kills a process that is not our child if a test fails while it runs.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0)
            && !wait_dead(self.0, Duration::ZERO)
        {
            // SAFETY: kill(2) on the pid of the sampler this test started (still alive).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// PR_SET_PDEATHSIG: when the process that started the sampler dies (slurmd killed with
/// SIGKILL, say), the sampler dies at once, even while Variorum hangs.
#[test]
fn the_sampler_dies_with_its_parent() {
    for mode in ["ok", "hang"] {
        let Some(fake) = FakeLib::new("the_sampler_dies_with_its_parent", Generation::V080) else {
            return;
        };
        fake.set_power("node=100.0");
        let out = fake.dir.path().join("out");
        // sh starts the sampler in the background, says its pid, and waits
        let mut parent = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" --library "$1" --period 0.1 --parent $$ > "$2" & echo $!; exec sleep 60"#)
            .arg(sampler())
            .arg(fake.library())
            .arg(&out)
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut first = String::new();
        BufReader::new(parent.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("pid");
        let pid: u32 = first.trim().parse().expect("sampler pid");
        let _cleanup = KillOnDrop(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("\"ok\":true")
        {
            assert!(Instant::now() < deadline, "the sampler did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(parent_of(pid), Some(parent.id()));
        if mode == "hang" {
            fake.set_mode("hang");
            let n = fake.calls().len();
            assert!(fake.wait_for_calls(n + 1, Duration::from_secs(5)));
        }
        parent.kill().expect("kill the parent");
        parent.wait().expect("reap the parent");
        assert!(
            wait_dead(pid, Duration::from_secs(2)),
            "{mode}: the sampler {pid} outlived its parent"
        );
    }
}

/// When the plugin stops reading (closes its end), the next write fails and the sampler
/// exits by itself.
#[test]
fn the_sampler_exits_when_nobody_reads() {
    let Some(fake) = FakeLib::new("the_sampler_exits_when_nobody_reads", Generation::V080) else {
        return;
    };
    fake.set_power("node=100.0");
    let mut child = spawn(&fake.library(), "0.1", Some(std::process::id()));
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ready = String::new();
    stdout.read_line(&mut ready).expect("ready");
    assert!(ready.contains("\"ready\":true"), "{ready}");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sampler kept running without a reader"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
