//! rust_gpu loaded by Slurm's own framework over the stand-in NVML and amd-smi
//! (tests/fakegpu): energy against the GPUs' true joules, a hung library, a lost GPU, a
//! driver reload, no library.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use energy_tests::fakegpu::{FakeGpus, Vendor, now_ns};
use support::*;

const GPU: &str = "acct_gather_energy/rust_gpu";

/// Runs the driver with the stand-in library. The tests start the power a second after
/// the driver and take the first figure before (the step counts from its first reading,
/// which must not fall on the power's start).
fn gpu_driver(
    tmp: &std::path::Path,
    fake: &FakeGpus,
    program: &str,
    cmds: &str,
) -> std::process::Child {
    let conf = slurm_conf(tmp, GPU, &fake.acct_gather());
    let child = driver(None, &conf, program, cmds);
    // The tests' schedules count from the driver's start, which a loaded machine delays
    // by a second or more: wait until the plugin has loaded the library (it does in its
    // first moments, when Slurm configures it), so that both count from about the same
    // instant. Tests without a loadable library wait the whole 3 s once.
    let maps = format!("/proc/{}/maps", child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline
        && !std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(&fake.library()))
    {
        sleep(Duration::from_millis(10));
    }
    child
}

/// Two GPUs enumerated in the reverse order of their minors, at different powers with a
/// power step: slurmd's node figure and its figure since a first read both get the sum (a
/// step's own figure comes from slurmd's ledger: tests/cluster_gpu.rs).
#[test]
fn node_and_step_energy_match_the_truth_for_both_vendors() {
    if !root_or_skip("node_and_step_energy_match_the_truth_for_both_vendors") {
        return;
    }
    for (vendor, minors) in [(Vendor::Nvidia, [5, 3]), (Vendor::Amd, [129, 128])] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fake = FakeGpus::new(vendor, &minors);
        let d = gpu_driver(
            tmp.path(),
            &fake,
            "slurmd",
            "sleep=500 step sleep=4500 step node config",
        );
        sleep(Duration::from_millis(1000));
        fake.set_power(minors[0], 180.0);
        fake.set_power(minors[1], 95.5);
        sleep(Duration::from_millis(1500));
        fake.set_power(minors[0], 320.0);
        sleep(Duration::from_millis(1500));
        fake.set_power(minors[0], 0.0);
        fake.set_power(minors[1], 0.0);
        let end = now_ns();
        let truth = fake.truth(minors[0], end) + fake.truth(minors[1], end);
        let (out, err) = finish(d);
        println!("{vendor:?}: {out}{err}");
        assert_close(
            &format!("{vendor:?} step"),
            joules(&out, "step", 1),
            truth,
            0.005,
        );
        assert_close(
            &format!("{vendor:?} node"),
            joules(&out, "node", 0),
            truth,
            0.005,
        );
        assert!(
            out.contains(&format!("config {}={}", vendor.key(), fake.library())),
            "{out}"
        );
    }
}

/// A GPU without an energy counter (NVML before Volta) is integrated from its power; one
/// whose driver reloads mid-step restarts its counter: never a negative or bogus delta.
#[test]
fn power_integration_and_a_driver_reload() {
    let Some(tmp) = root_test_dir("power_integration_and_a_driver_reload") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &[0, 1]);
    fake.set_mode(1, "nosupport");
    fake.record_power_reads(1);
    let d = gpu_driver(
        tmp.path(),
        &fake,
        "slurmd",
        "sleep=500 step sleep=5500 step",
    );
    sleep(Duration::from_millis(1000));
    fake.set_power(0, 200.0);
    // low, so that what sampling it can miss is well below a lost reload gap (0.25 s of 200 W)
    fake.set_power(1, 60.0);
    sleep(Duration::from_millis(2000));
    fake.set_mode(0, &format!("reload@{}", now_ns()));
    sleep(Duration::from_millis(2000));
    fake.set_power(0, 0.0);
    fake.set_power(1, 0.0);
    let end = now_ns();
    let truth = fake.truth(0, end) + fake.truth(1, end);
    let (out, err) = finish(d);
    println!("{out}{err}");
    // GPU 1's power is read every 0.25 s (later on a loaded machine): each of its two changes
    // can cost up to half the time between the reads around it, of its power, as the reads
    // were made; the reload's gap is estimated from the power after it (0.5%)
    let sampling = fake.power_sampling_bound(1, end);
    println!("GPU 1's sampling can miss up to {sampling:.1} J");
    assert!(
        sampling < 0.1 * truth,
        "GPU 1 was read too seldom to judge ({sampling:.1} J)"
    );
    assert_close(
        "step",
        joules(&out, "step", 1),
        truth,
        0.005 + sampling / truth,
    );
    assert!(
        err.contains("no energy counter; its power is integrated"),
        "{err}"
    );
    assert!(err.contains("energy counter restarted"), "{err}");
}

/// The library hangs in every call on one GPU for 14.5 s: no call into the plugin waits
/// on it (each is far below the hang), the figure becomes unavailable rather than 0 once the last reading is too old
/// (2 s for the poller, then the meter's 10 s), and when the GPU answers again its counter
/// has the energy of the hang: nothing is lost.
#[test]
fn a_hung_library_never_slows_a_call_and_loses_no_energy() {
    let Some(tmp) = root_test_dir("a_hung_library_never_slows_a_call_and_loses_no_energy") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &[0, 1]);
    let d = gpu_driver(
        tmp.path(),
        &fake,
        "slurmd",
        "sleep=1000 node sleep=500 probe=135 sleep=2500 node sleep=1000 node",
    );
    sleep(Duration::from_millis(1400));
    fake.set_mode(1, "hang");
    sleep(Duration::from_millis(600));
    fake.set_power(0, 100.0);
    fake.set_power(1, 200.0);
    sleep(Duration::from_millis(12_000));
    fake.set_power(0, 0.0);
    fake.set_power(1, 0.0);
    let end = now_ns();
    sleep(Duration::from_millis(1900));
    fake.set_mode(1, "ok");
    let truth = fake.truth(0, end) + fake.truth(1, end);
    let (out, err) = finish(d);
    println!("{out}{err}");
    let slowest: u64 = field(&out, "probe", 0, "slowest_us")
        .parse()
        .expect("slowest_us");
    println!("slowest call while the library hung: {slowest} us");
    assert!(
        slowest < CALL_NEVER_WAITS_US,
        "a call took {slowest} us while the library hung"
    );
    assert_eq!(
        field(&out, "probe-last", 0, "consumed"),
        "unavailable",
        "after 13 s of a hung GPU the node figure is unavailable, not 0:\n{out}"
    );
    let measured = joules(&out, "node", 2) - joules(&out, "node", 0);
    assert_close("energy across the hang", measured, truth, 0.005);
    assert!(err.contains("has not been read for over"), "{err}");
    assert!(err.contains("energy readings are back"), "{err}");
}

/// A GPU that falls off the bus (NVML_ERROR_GPU_IS_LOST) stops counting, and one NVML
/// gives no handle for (NO_PERMISSION) is not read; the node goes on with the others,
/// never 0 or unavailable.
#[test]
fn a_lost_gpu_is_only_that_gpu() {
    let Some(tmp) = root_test_dir("a_lost_gpu_is_only_that_gpu") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &[0, 1, 2]);
    fake.set_mode(2, "noperm");
    let d = gpu_driver(
        tmp.path(),
        &fake,
        "slurmd",
        "sleep=500 step sleep=3500 step",
    );
    sleep(Duration::from_millis(800));
    fake.set_mode(1, "lost");
    sleep(Duration::from_millis(200));
    fake.set_power(0, 300.0); // 600 J: Slurm's whole joules cost at most 0.17%
    fake.set_power(1, 200.0);
    sleep(Duration::from_millis(2000));
    fake.set_power(0, 0.0);
    fake.set_power(1, 0.0);
    let truth = fake.truth(0, now_ns());
    let (out, err) = finish(d);
    println!("{out}{err}");
    assert_close(
        "step with GPU 1 lost",
        joules(&out, "step", 1),
        truth,
        0.005,
    );
    assert!(
        err.contains("is lost; its energy until now is kept"),
        "{err}"
    );
}

/// No library, or no driver: the plugin loads, says why once, and reports unavailable.
#[test]
fn without_a_library_or_a_driver_energy_is_unavailable() {
    let Some(tmp) = root_test_dir("without_a_library_or_a_driver_energy_is_unavailable") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &[0]);
    fake.set_driver_missing();
    let conf = slurm_conf(
        tmp.path(),
        GPU,
        &format!(
            "EnergyGpuNvmlLibrary={}\nEnergyGpuAmdLibrary={}/none/libamd_smi.so\n",
            fake.library(),
            tmp.path().display()
        ),
    );
    let d = driver(
        None,
        &conf,
        "slurmd",
        "node sleep=1500 node sleep=500 node step",
    );
    let (out, err) = finish(d);
    println!("{out}{err}");
    for n in 0..3 {
        assert_eq!(field(&out, "node", n, "consumed"), "unavailable", "{out}");
    }
    assert_eq!(field(&out, "step", 0, "consumed"), "unavailable", "{out}");
    assert_eq!(
        err.matches("no GPU energy on this node").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("nvmlInit_v2: NVML error 9: Driver Not Loaded"),
        "{err}"
    );
    assert!(err.contains("cannot load"), "{err}");
}
