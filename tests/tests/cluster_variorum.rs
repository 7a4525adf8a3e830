//! rust_variorum in a real Slurm cluster, over a stand-in libvariorum.so of each API
//! generation: sacct against the true integral of the power schedule, and a library that
//! crashes or hangs mid-job while slurmd must keep answering.

#[path = "../fakevariorum/harness.rs"]
mod fakevariorum;
use energy_tests as support;

use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use fakevariorum::{FakeLib, Generation};
use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::*;

const VARIORUM: &str = "acct_gather_energy/rust_variorum";

fn set_power_command(lib: &FakeLib, watts: u32) -> String {
    format!(
        "sh {} {} {watts}",
        workspace()
            .join("tests/fakevariorum/set_power.sh")
            .display(),
        lib.dir.path().display()
    )
}

fn set_power(lib: &FakeLib, watts: u32) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(set_power_command(lib, watts))
        .status()
        .expect("set_power.sh");
    assert!(status.success());
}

/// A real node never draws 0 W, and the plugin rightly takes an all-zero Variorum sample
/// for "no reading": between jobs the fake node idles at this power.
const IDLE_WATTS: u32 = 10;

/// True joules between the job's first and last power change (the entries after the
/// first `skip`): the step's script opens and closes with one, at idle power, so the step
/// measures the same interval give or take a few milliseconds of idle.
fn job_joules(dir: &Path, skip: usize) -> f64 {
    let s = power_schedule(&dir.join("power.log"));
    let job = &s[skip.min(s.len())..];
    job.windows(2)
        .map(|w| w[0].1 * (w[1].0 - w[0].0) / 1e9)
        .sum()
}

/// `period`: EnergyVariorumFrequency, with a 3 s timeout; `None`: both at their defaults.
fn variorum_cluster(tmp: &Path, lib: &FakeLib, period: Option<&str>) -> Cluster {
    let timing = period
        .map(|p| format!("EnergyVariorumFrequency={p}\nEnergyVariorumTimeout=3\n"))
        .unwrap_or_default();
    Cluster::up(
        tmp,
        &ClusterSpec {
            energy_type: VARIORUM,
            acct_gather: &format!("EnergyVariorumLibrary={}\n{timing}", lib.library()),
            ..ClusterSpec::default()
        },
    )
}

/// Power sampled every 0.25 s and integrated: each of the 4 power changes costs at most
/// half a period of its step (at 1 s that could reach ±5% for this schedule).
#[test]
fn rust_variorum_job_energy_matches_the_truth_with_both_api_generations() {
    if !root_or_skip("rust_variorum_job_energy_matches_the_truth_with_both_api_generations") {
        return;
    }
    for generation in [Generation::V080, Generation::V070] {
        let Some(lib) = FakeLib::new("rust_variorum cluster", generation) else {
            return;
        };
        set_power(&lib, IDLE_WATTS);
        let tmp = tempfile::tempdir().expect("tempdir");
        let cluster = variorum_cluster(tmp.path(), &lib, Some("0.25"));
        let s = |w| set_power_command(&lib, w);
        let before = power_schedule(&lib.dir.path().join("power.log")).len();
        let job = cluster.sbatch(&format!(
            "#!/bin/sh\nsrun -n1 sh -c '{}; sleep 3; {}; sleep 10; {}; sleep 10; {}; sleep 10; {}; sleep 3; {}'\n",
            s(IDLE_WATTS),
            s(300),
            s(200),
            s(360),
            s(IDLE_WATTS),
            s(IDLE_WATTS)
        ));
        cluster.wait_job(job, Duration::from_secs(120));
        let truth = job_joules(lib.dir.path(), before);
        let measured = energy_of(&cluster.energy(job), &format!("{job}.0"));
        assert_close(&format!("{generation:?} step"), measured, truth, 0.02);
    }
}

/// What an admin who names only the library gets: a 40 s job whose power steps from 150
/// to 350 W mid-job, within 2% (at the former 10 s default: -10%).
#[test]
fn at_default_settings_a_power_step_is_within_two_percent() {
    if !root_or_skip("at_default_settings_a_power_step_is_within_two_percent") {
        return;
    }
    let Some(lib) = FakeLib::new("rust_variorum defaults", Generation::V080) else {
        return;
    };
    set_power(&lib, 150);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = variorum_cluster(tmp.path(), &lib, None);
    let job = cluster.sbatch(&power_step_script(
        tmp.path(),
        &set_power_command(&lib, 350),
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    set_power(&lib, IDLE_WATTS);
    let truth = power_step_truth(tmp.path(), &lib.dir.path().join("power.log"));
    let measured = energy_of(&cluster.energy(job), &format!("{job}.0"));
    assert_close("step at defaults", measured, truth, 0.02);
}

/// The library crashes (SIGSEGV) and then hangs mid-job: the sampler dies or is killed and
/// restarted, slurmd answers at once throughout, and accounting holds no bogus figure.
#[test]
fn a_crashing_or_hanging_library_never_slows_slurmd() {
    if !root_or_skip("a_crashing_or_hanging_library_never_slows_slurmd") {
        return;
    }
    let Some(lib) = FakeLib::new("rust_variorum faults", Generation::V080) else {
        return;
    };
    set_power(&lib, IDLE_WATTS);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = variorum_cluster(tmp.path(), &lib, Some("0.25"));
    let s = |w| set_power_command(&lib, w);
    let before = power_schedule(&lib.dir.path().join("power.log")).len();
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}; sleep 2; {}; sleep 34; {}; sleep 3; {}'\n",
        s(IDLE_WATTS),
        s(240),
        s(IDLE_WATTS),
        s(IDLE_WATTS)
    ));
    wait_for_power(
        &lib.dir.path().join("power.log"),
        before,
        240,
        Duration::from_secs(1),
    );
    let mut slowest = Duration::ZERO;
    for mode in ["crash", "hang"] {
        lib.set_mode(mode);
        slowest = slowest.max(cluster.slowest_answer(job, Duration::from_secs(8)));
        lib.set_mode("ok");
        sleep(Duration::from_secs(4));
    }
    println!("slowest answer while Variorum misbehaved: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "an answer took {slowest:?}"
    );
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = job_joules(lib.dir.path(), before);
    let measured = energy_of(&cluster.energy(job), &format!("{job}.0"));
    println!(
        "{}",
        cluster.run(&[
            "sacct",
            "-j",
            &job.to_string(),
            "-o",
            "JobID,State,ExitCode,ConsumedEnergyRaw"
        ])
    );
    // the gaps are bridged between the samples before and after, at constant power
    assert_close("step across crash and hang", measured, truth, 0.02);
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("reading power failed"),
        "the failure is logged:\n{log}"
    );
    assert!(
        log.contains("power readings are back"),
        "the recovery is logged"
    );
}
