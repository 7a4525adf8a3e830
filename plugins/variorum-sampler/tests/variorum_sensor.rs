//! `slurm_energy_logic::variorum::VariorumSensor` (the sensor of power of rust_variorum) against this
//! package's sampler and a fake libvariorum.so of each Variorum generation
//! (tests/fakevariorum): the watts of every JSON shape, and every way the library can
//! misbehave (error, garbage, exit, crash, hang, noise).
//!
//! These live in the sampler's package because it depends on slurm-energy-logic and gets the
//! sampler's path from Cargo; the process-level tests of the sampler itself are in
//! tests/tests/variorum_sampler.rs.

#[path = "../../../tests/fakevariorum/harness.rs"]
mod fakevariorum;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fakevariorum::{FakeLib, Generation, open_fds, process_state, processes_with};
use slurm_energy_logic::variorum::protocol::Line;
use slurm_energy_logic::variorum::sampler::Sampler;
use slurm_energy_logic::variorum::{NodePower, NodeSource, VariorumConfig, VariorumSensor, json};
use slurm_energy_logic::{Failure, Sensor};

const SAMPLER: &str = env!("CARGO_BIN_EXE_acct_gather_energy_rust_variorum_sampler");
const PERIOD: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(1);
/// What a failing read may take beyond the timeout (process kill, reap, scheduling).
const MARGIN: Duration = Duration::from_millis(1500);

fn config(fake: &FakeLib) -> VariorumConfig {
    VariorumConfig {
        library: fake.library(),
        period: PERIOD,
        sampler: Some(PathBuf::from(SAMPLER)),
        timeout: TIMEOUT,
        max_watts: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

/// Waits until two more calls have been made, so that the newest sample was taken after
/// whatever was just changed in the control files.
fn settle(fake: &FakeLib) {
    let n = fake.calls().len();
    assert!(
        fake.wait_for_calls(n + 2, Duration::from_secs(5)),
        "the sampler stopped calling Variorum"
    );
}

/// The one sampler running for this fake library.
fn sampler_pid(fake: &FakeLib) -> u32 {
    let samplers = processes_with(&fake.library());
    assert_eq!(samplers.len(), 1, "one sampler: {samplers:?}");
    samplers[0].0
}

/// The per-socket breakdown of the fake's power now: the sampler's next sample as the
/// plugin parses it.
fn breakdown(fake: &FakeLib) -> NodePower {
    let mut sampler = Sampler::spawn(Path::new(SAMPLER), &fake.library(), PERIOD).expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(5);
    let ready = sampler.oldest(deadline, "start-up report").expect("ready");
    assert!(matches!(ready, Line::Ready { .. }), "{ready:?}");
    match sampler.oldest(deadline, "sample").expect("sample") {
        Line::Sample { json, .. } => json::parse(&json).expect("Variorum's JSON"),
        other => panic!("{:?}: {other:?}", fake.generation),
    }
}

fn connect(fake: &FakeLib) -> VariorumSensor {
    match VariorumSensor::connect(&config(fake)) {
        Ok(v) => v,
        Err(e) => panic!("connect to {:?}: {e}", fake.generation),
    }
}

/// The Corona sample quoted in the reference, then the same node with its node figure
/// unusable (-1.0) so that the sum of the components is taken.
#[test]
fn every_generation_reports_the_power_it_is_given() {
    for generation in Generation::ALL {
        let Some(fake) = FakeLib::new("every_generation_reports_the_power_it_is_given", generation)
        else {
            continue;
        };
        fake.set_power(
            "host=corona285 node=384.0 cpu0=85.0 mem0=23.0 gpu0=66.0 \
             cpu1=77.0 mem1=23.0 gpu1=66.0",
        );
        let mut v = connect(&fake);
        let version = match generation {
            Generation::V080 => "0.5.0", // sic: 0.8.0 reports its stale CMake version
            Generation::V070 => "0.7.0",
            _ => "",
        };
        let described = v.describe();
        let says = if version.is_empty() {
            format!("({})", generation.api())
        } else {
            format!("({}, says version {version})", generation.api())
        };
        assert!(described.contains(&says), "{described}");
        assert!(
            described.ends_with(&format!(" pid {}", sampler_pid(&fake))),
            "{described}"
        );
        for _ in 0..3 {
            let w = v.poll(Instant::now()).expect("read").watts;
            assert!(close(w, 384.0), "{generation:?}: {w}");
        }
        drop(v);
        let last = breakdown(&fake);
        assert_eq!(last.source, NodeSource::Reported);
        assert_eq!(last.host.as_deref(), Some("corona285"));
        assert_eq!(last.sockets.len(), 2);
        assert_eq!(last.sockets[1].cpu_watts, Some(77.0));

        fake.set_power("node=-1.0 cpu0=50.5 mem0=5 gpu0=-1.0 cpu1=44.5 mem1=-1.0");
        let mut v = connect(&fake);
        let w = v.poll(Instant::now()).expect("read the sum").watts;
        assert!(close(w, 100.0), "{generation:?}: {w}");
        drop(v);
        let last = breakdown(&fake);
        assert_eq!(last.source, NodeSource::SumOfComponents);
        assert_eq!(last.sockets[0].gpu_watts, None);
        assert_eq!(last.sockets[1].mem_watts, None);
    }
}

/// 0.8.0's per-GPU objects, `Socket_N` keys, a bare GPU number (ARM Juno), no node key
/// (GPU-only builds), and a node figure that already includes the GPUs (NVIDIA port).
#[test]
fn nested_json_with_gpus() {
    let Some(fake) = FakeLib::new("nested_json_with_gpus", Generation::V080) else {
        return;
    };
    fake.set_power("case=upper gpu0=70.0,72.5 gpu1=69.0,71.0");
    let mut v = connect(&fake);
    let w = v.poll(Instant::now()).expect("gpu only").watts;
    assert!(close(w, 282.5), "{w}");
    let last = breakdown(&fake);
    assert_eq!(last.sockets[0].gpus.len(), 2);
    assert_eq!(last.sockets[1].gpus[1].name, "GPU_3");
    assert!(close(last.sockets[0].gpu_watts.expect("gpu"), 142.5));

    fake.set_power("node=3.0 cpu0=1.25 gpu0=0.5 cpu1=0.75 gpu1=-1.0");
    settle(&fake);
    assert!(close(v.poll(Instant::now()).expect("juno").watts, 3.0));

    fake.set_power("node=520.0 cpu0=100 mem0=10 gpu0=150,150 cpu1=90 mem1=20");
    settle(&fake);
    assert!(close(v.poll(Instant::now()).expect("cpu+gpu").watts, 520.0));
}

/// Intel's first call after loading reports 0 W (a delta with no previous call): the
/// sampler discards it, so the first sample is real.
#[test]
fn the_zero_watt_first_call_is_never_a_sample() {
    for generation in [Generation::V070, Generation::V080] {
        let Some(fake) = FakeLib::new("the_zero_watt_first_call_is_never_a_sample", generation)
        else {
            continue;
        };
        fake.set_power("intel_first_zero=1 node=210.0 cpu0=100 mem0=5 cpu1=100 mem1=5");
        let mut v = connect(&fake);
        assert!(close(
            v.poll(Instant::now()).expect("first sample").watts,
            210.0
        ));
        assert!(fake.calls().len() >= 2, "a warm-up call, then the sample");
    }
}

/// A sample without power (Variorum 0.8.0 on a CPU it has no code for) is an error,
/// not 0 W; the sampler answered well, so it is kept and the reading skipped.
#[test]
fn a_sample_without_power_is_an_error() {
    let Some(fake) = FakeLib::new("a_sample_without_power_is_an_error", Generation::V080) else {
        return;
    };
    fake.set_power("host=icx1");
    let mut v = connect(&fake);
    let pid = sampler_pid(&fake);
    let err = v.poll(Instant::now()).expect_err("no power");
    assert!(matches!(err, Failure::Retry(_)), "{err:?}");
    assert!(err.to_string().contains("no power values"), "{err}");
    assert!(process_state(pid).is_some(), "the sampler is kept");
}

/// One misbehaviour, against every generation: the read fails within the timeout, the
/// sampler is gone (reaped, no zombie), connecting fails or the next read fails while the
/// library keeps misbehaving, and everything works again once it behaves.
fn misbehaviour(test: &str, mode: &str, connect_fails: bool, expect: &str) {
    for generation in Generation::ALL {
        let Some(fake) = FakeLib::new(test, generation) else {
            continue;
        };
        fake.set_power("node=300.0 cpu0=140 mem0=10 cpu1=140 mem1=10");
        let mut v = connect(&fake);
        assert!(close(v.poll(Instant::now()).expect("before").watts, 300.0));
        let pid = sampler_pid(&fake);

        fake.set_mode(mode);
        let n = fake.calls().len();
        assert!(
            fake.wait_for_calls(n + 1, Duration::from_secs(5)),
            "{generation:?}: no call"
        );
        // samples taken before the mode changed may still be in the pipe: at most one read
        // returns one of them
        let mut error = None;
        for _ in 0..3 {
            let start = Instant::now();
            let result = v.poll(Instant::now());
            assert!(
                start.elapsed() < TIMEOUT + MARGIN,
                "{generation:?} {mode}: read took {:?}",
                start.elapsed()
            );
            if let Err(e) = result {
                error = Some(e);
                break;
            }
        }
        let error = error.unwrap_or_else(|| panic!("{generation:?} {mode}: no error"));
        if let Failure::Retry(e) = &error {
            // well-formed JSON without power (jansson generations in garbage mode): skipped,
            // the sampler kept; drop it here to go on as after a broken one
            assert!(e.contains("no power"), "{generation:?} {mode}: {e}");
            drop(v);
        } else {
            assert!(
                error.to_string().contains(expect),
                "{generation:?} {mode}: {error}"
            );
        }
        assert_eq!(
            process_state(pid),
            None,
            "{generation:?} {mode}: the sampler {pid} must be killed and reaped"
        );

        let start = Instant::now();
        let again = VariorumSensor::connect(&config(&fake));
        assert!(
            start.elapsed() < TIMEOUT + MARGIN,
            "{generation:?} {mode}: connect"
        );
        match again {
            Err(e) => assert!(connect_fails, "{generation:?} {mode}: connect failed: {e}"),
            Ok(mut v) => {
                assert!(!connect_fails, "{generation:?} {mode}: connect worked");
                let pid = sampler_pid(&fake);
                match v.poll(Instant::now()) {
                    // well-formed JSON without power: skipped, the sampler kept until dropped
                    Err(Failure::Retry(_)) => drop(v),
                    Err(Failure::Reconnect(_)) => {}
                    Ok(s) => panic!("{generation:?} {mode}: read {} W", s.watts),
                }
                assert_eq!(process_state(pid), None);
            }
        }
        assert_eq!(
            processes_with(&fake.library()),
            vec![],
            "{generation:?} {mode}: a sampler was left behind"
        );

        fake.set_mode("ok");
        let mut v = connect(&fake);
        assert!(
            close(v.poll(Instant::now()).expect("after").watts, 300.0),
            "{generation:?} {mode}"
        );
        let pid = sampler_pid(&fake);
        drop(v);
        assert_eq!(process_state(pid), None, "dropping kills and reaps");
    }
}

#[test]
fn variorum_returning_an_error() {
    misbehaviour("variorum_returning_an_error", "error", true, "returned -1");
}

#[test]
fn variorum_returning_garbage() {
    // invalid JSON from the char ** generations; valid JSON without power from jansson
    misbehaviour("variorum_returning_garbage", "garbage", false, "JSON");
}

#[test]
fn variorum_calling_exit() {
    misbehaviour(
        "variorum_calling_exit",
        "exit",
        true,
        "the sampler exited with status 3",
    );
}

#[test]
fn variorum_crashing() {
    misbehaviour("variorum_crashing", "crash", true, "signal 11 (SIGSEGV)");
}

#[test]
fn variorum_hanging() {
    misbehaviour(
        "variorum_hanging",
        "hang",
        true,
        "no sample from the sampler within",
    );
}

/// Junk on stdout (including lines shaped like the protocol) and stderr changes nothing.
#[test]
fn variorum_printing_noise() {
    for generation in Generation::ALL {
        let Some(fake) = FakeLib::new("variorum_printing_noise", generation) else {
            continue;
        };
        fake.set_power("node=250.0 cpu0=120 mem0=5 cpu1=120 mem1=5");
        fake.set_mode("noise");
        let mut v = connect(&fake);
        for _ in 0..5 {
            let w = v.poll(Instant::now()).expect("noise is not a sample").watts;
            assert!(close(w, 250.0), "{generation:?}: {w}");
            std::thread::sleep(PERIOD);
        }
        assert!(fake.calls().iter().all(|(_, mode)| mode == "noise"));
    }
}

/// The sampler holds the result pipe and nothing else of ours: not the pipe's read end,
/// not descriptors opened without O_CLOEXEC, as slurmd's may be.
#[test]
fn no_descriptor_leaks_into_the_sampler() {
    let Some(fake) = FakeLib::new("no_descriptor_leaks_into_the_sampler", Generation::V080) else {
        return;
    };
    fake.set_power("node=100.0");
    let leaky = tempfile::NamedTempFile::new().expect("tmp");
    let path = std::ffi::CString::new(leaky.path().as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: open(2) with a valid path; deliberately without O_CLOEXEC.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0);
    let mut v = connect(&fake);
    v.poll(Instant::now()).expect("read");
    let fds = open_fds(sampler_pid(&fake));
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    let pipes: Vec<_> = fds.iter().filter(|(_, t)| t.starts_with("pipe:")).collect();
    assert_eq!(pipes.len(), 1, "only the result pipe: {fds:?}");
    assert!(
        pipes[0].0 >= 3,
        "the result pipe is moved off stdout: {fds:?}"
    );
    for (n, target) in &fds {
        let allowed = target == "/dev/null"
            || target.starts_with("/memfd:variorum-output")
            || target.starts_with("pipe:");
        assert!(
            allowed,
            "fd {n} -> {target} leaked into the sampler: {fds:?}"
        );
    }
    for n in [1, 2] {
        let target = &fds.iter().find(|(fd, _)| *fd == n).expect("fd 1 and 2").1;
        assert!(target.starts_with("/memfd:"), "fd {n} -> {target}");
    }
}

#[test]
fn connect_errors_say_why() {
    let Some(fake) = FakeLib::new("connect_errors_say_why", Generation::V080) else {
        return;
    };
    let mut missing = config(&fake);
    missing.library = format!("{}/nonexistent/libvariorum.so", fake.dir.path().display());
    let err = VariorumSensor::connect(&missing).err().expect("no library");
    assert!(
        err.contains("cannot load") && err.contains("nonexistent"),
        "{err}"
    );

    let mut not_variorum = config(&fake);
    not_variorum.library = "libc.so.6".into();
    let err = VariorumSensor::connect(&not_variorum)
        .err()
        .expect("not variorum");
    assert!(err.contains("neither variorum_get_power_json"), "{err}");

    let mut no_sampler = config(&fake);
    no_sampler.sampler = Some(fake.dir.path().join("no-sampler"));
    let err = VariorumSensor::connect(&no_sampler)
        .err()
        .expect("no sampler");
    assert!(err.contains("cannot start the sampler"), "{err}");
}
