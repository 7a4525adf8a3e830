//! rust_hwmon loaded by Slurm's own framework over a simulated hwmon class (hwmonsim: ACPI
//! power meters as the kernel lays them out, NVIDIA's rail names, `power1_average` updated
//! once an averaging interval): a Grace Hopper node's energy from its module rails against
//! the true joules, the other rails beside it, a sensor that vanishes and returns, an
//! older kernel's layout (attributes on the device), and a node without a power meter.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use support::hwmonsim::HwmonSim;
use support::*;

const HWMON: &str = "acct_gather_energy/rust_hwmon";

/// The power changes while the step runs, and is 0 W for its last 2.5 s (a mean over a
/// window shows a change up to a window late). Returns the driver's output and the true
/// joules of the step.
fn run_step(sim: &HwmonSim, cmds: &str, during: impl FnOnce()) -> (String, String, f64) {
    let conf = slurm_conf(&sim.dir.join("slurm"), HWMON, &sim.acct_gather());
    let before = sim.node_truth();
    let driver = driver(None, &conf, "slurmd", cmds);
    sleep(Duration::from_millis(500));
    during();
    sim.set(0);
    let (out, err) = finish(driver);
    println!("{out}{err}");
    (out, err, sim.node_truth() - before)
}

fn start(tmp: &tempfile::TempDir, args: &str) -> HwmonSim {
    let sim = HwmonSim::start(&tmp.path().join("hw"), args);
    std::fs::create_dir_all(sim.dir.join("slurm")).expect("mkdir");
    sim
}

#[test]
fn a_grace_hopper_nodes_energy_is_its_modules_with_the_other_rails_beside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = start(&tmp, "--platform gh200 --sockets 2 --interval-ms 1000");
    let (out, err, truth) = run_step(&sim, "step sleep=9500 step sensors struct", || {
        for watts in [900, 600, 1300] {
            sim.set(watts);
            sleep(Duration::from_secs(2));
        }
    });
    assert_eq!(joules(&out, "step", 0), 0.0);
    // each mean counted over its interval once the meter's phase is known; the first
    // change dated to within half a read, further apart on a loaded machine
    assert_close("step", joules(&out, "step", 1), truth, 0.015);
    // node, grace, cpu, sysio
    assert_eq!(field(&out, "sensors", 0, "count"), "4");
    let parts = sim.truth().1;
    for (i, name) in ["grace", "cpu", "sysio"].iter().enumerate() {
        let part_truth = parts.iter().find(|(n, _)| n == name).expect("part").1;
        assert_close(
            name,
            joules(&out, &format!("struct[{}]", i + 1), 0),
            part_truth,
            0.02,
        );
    }
    assert!(
        err.contains("(Module Power Socket 0) + hwmon5/power1_average (Module Power Socket 1)")
            && err.contains("parts Grace, Cpu, Sysio beside the node"),
        "{err}"
    );
}

/// The first module's `power1_average` vanishes for 2 s, then reads as garbage for 2 s
/// (each after the meter has shown 450 W for a few intervals):
/// named in the log, the node unavailable while it is (never 0), and once it is back the
/// gap is bridged from the readings around it (exact at constant power).
#[test]
fn a_sensor_that_vanishes_and_returns_is_bridged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = start(
        &tmp,
        "--platform gh200 --sockets 1 --interval-ms 1000 --watts 0",
    );
    // the meter shows 450 W for a few intervals before each fault: a gap is bridged from
    // the readings around it, exact where the power is the same on both sides
    let (out, err, truth) = run_step(&sim, "step sleep=13000 step", || {
        sim.set(450);
        sleep(Duration::from_secs(3));
        sim.glitch("vanish", 2.0);
        sleep(Duration::from_secs(4));
        sim.glitch("garbage", 2.0);
        sleep(Duration::from_secs(3));
    });
    assert_close(
        "step across the faults",
        joules(&out, "step", 1),
        truth,
        0.015,
    );
    assert!(
        err.contains("hwmon1/power1_average: "),
        "the file is named: {err}"
    );
    assert!(err.contains("cannot read"), "the garbage is named: {err}");
    assert!(err.contains("hwmon1/power1_average is read again"), "{err}");
}

/// Kernels before 6.x put an ACPI power meter's attributes on its device
/// (`hwmonN/device/`): an x86 server's one meter, found there.
#[test]
fn a_servers_acpi_meter_on_its_device_is_the_node() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = start(&tmp, "--platform acpi --on-device 1 --interval-ms 1000");
    let (out, err, truth) = run_step(&sim, "step sleep=9500 step sensors", || {
        sim.set(350);
        sleep(Duration::from_secs(6));
    });
    // a change is dated half-way between the read before it and the read that saw it
    // until the meter's phase is known, and again where a later one falls off the phase:
    // within a read of 350 W, 35 J (1.7% of the 2 100 J here) where reads are 0.1 s apart
    // as the poller times them, 52 J (2.5%) where a loaded machine runs it 0.15 s apart
    // (seen: -1.49%; mostly within 0.02%)
    assert_close("step", joules(&out, "step", 1), truth, 0.025);
    assert_eq!(field(&out, "sensors", 0, "count"), "1");
    assert!(err.contains("hwmon1/device/power1_average"), "{err}");
}

#[test]
fn a_node_without_a_power_meter_reports_unavailable_and_says_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hwmon = tmp.path().join("hwmon");
    std::fs::create_dir_all(hwmon.join("hwmon0")).expect("mkdir");
    std::fs::write(hwmon.join("hwmon0/name"), "acpitz\n").expect("name");
    std::fs::write(hwmon.join("hwmon0/temp1_input"), "27800\n").expect("temp");
    let conf = slurm_conf(
        tmp.path(),
        HWMON,
        &format!("EnergyHwmonDir={}\n", hwmon.display()),
    );
    let (out, err) = finish(driver(None, &conf, "slurmd", "update node sensors config"));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert!(err.contains("EnergyHwmonSensors"), "{err}");
    assert!(out.contains("config EnergyHwmonSensors=auto"), "{out}");
    let conf = slurm_conf(tmp.path(), HWMON, "EnergyHwmonDir=relative\n");
    let (out, err) = finish(driver(None, &conf, "slurmd", "update node"));
    assert!(err.contains("invalid EnergyHwmonDir=relative"), "{err}");
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
}
