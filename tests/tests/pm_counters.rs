//! rust_pm_counters loaded by Slurm's own framework over a simulated node controller
//! (pmsim: the files, format and scan rate of /sys/cray/pm_counters): energy from the
//! controller's counter against the true joules, the parts beside the node, a controller
//! restart, a vanished and an unreadable file.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use support::pmsim::PmSim;
use support::*;

const PM: &str = "acct_gather_energy/rust_pm_counters";

/// The power changes while the step runs; the final read comes after the last scan saw
/// the power off. Returns the driver's output and the true joules of the step.
fn run_step(sim: &PmSim, cmds: &str, during: impl FnOnce()) -> (String, String, f64) {
    let conf = slurm_conf(&sim.dir.join("slurm"), PM, &sim.acct_gather());
    let before = sim.node_truth();
    let driver = driver(None, &conf, "slurmd", cmds);
    sleep(Duration::from_millis(500));
    during();
    sim.set(0);
    let (out, err) = finish(driver);
    println!("{out}{err}");
    (out, err, sim.node_truth() - before)
}

#[test]
fn node_energy_is_the_controllers_counter_and_parts_are_beside_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = PmSim::start(&tmp.path().join("pm"), "--accels 2");
    std::fs::create_dir_all(sim.dir.join("slurm")).expect("mkdir");
    let (out, err, truth) = run_step(&sim, "step sleep=7000 step sensors struct", || {
        for watts in [320, 180, 410] {
            sim.set(watts);
            sleep(Duration::from_secs(2));
        }
    });
    assert_eq!(joules(&out, "step", 0), 0.0);
    assert_close("step", joules(&out, "step", 1), truth, 0.001);
    // node, cpu, memory, accel0, accel1
    assert_eq!(field(&out, "sensors", 0, "count"), "5");
    let parts = sim.truth().1;
    for (i, name) in ["cpu", "memory", "accel0", "accel1"].iter().enumerate() {
        let part_truth = parts.iter().find(|(n, _)| n == name).expect("part").1;
        assert_close(
            name,
            joules(&out, &format!("struct[{}]", i + 1), 0),
            part_truth,
            0.01,
        );
    }
    // the node's figure is the node's counter, not a sum of the parts
    assert_close("struct", joules(&out, "struct", 0), sim.node_truth(), 0.001);
    assert!(
        err.contains("parts cpu, memory, accel0, accel1 beside the node"),
        "{err}"
    );
}

/// The controller restarts mid-step: its counters start again from zero. The step neither
/// goes negative nor jumps; the gap (under a second, sampled every second) is estimated
/// from the power before it, exact at constant power.
#[test]
fn a_controller_restart_mid_step_is_bridged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = PmSim::start(&tmp.path().join("pm"), "--accels 0");
    std::fs::create_dir_all(sim.dir.join("slurm")).expect("mkdir");
    let (out, err, truth) = run_step(&sim, "step sleep=7000 step", || {
        sim.set(300);
        sleep(Duration::from_secs(3));
        sim.glitch("restart", 0.0);
        sleep(Duration::from_secs(3));
    });
    assert_close(
        "step across a restart",
        joules(&out, "step", 1),
        truth,
        0.01,
    );
    assert!(err.contains("counter restarted (startup changed)"), "{err}");
}

/// The energy file vanishes, then reads as garbage: the figure never goes wrong, and once
/// the file is back the counter (the truth itself) catches up exactly.
#[test]
fn a_vanished_or_garbage_energy_file_loses_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = PmSim::start(&tmp.path().join("pm"), "--accels 0");
    std::fs::create_dir_all(sim.dir.join("slurm")).expect("mkdir");
    let (out, err, truth) = run_step(&sim, "step sleep=9000 step", || {
        sim.set(250);
        sleep(Duration::from_secs(1));
        sim.glitch("vanish", 2.0);
        sleep(Duration::from_secs(3));
        sim.glitch("garbage", 2.0);
        sleep(Duration::from_secs(3));
    });
    assert_close(
        "step across the faults",
        joules(&out, "step", 1),
        truth,
        0.001,
    );
    assert!(err.contains("reading energy failed: energy: "), "{err}");
    assert!(err.contains("cannot read"), "the garbage is named: {err}");
    assert!(err.contains("energy readings are back"), "{err}");
}

#[test]
fn a_node_without_pm_counters_reports_unavailable_and_says_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let conf = slurm_conf(
        tmp.path(),
        PM,
        "EnergyPmCountersDir=/nonexistent/pm_counters\n",
    );
    let (out, err) = finish(driver(None, &conf, "slurmd", "update node sensors config"));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert_eq!(field(&out, "sensors", 0, "count"), "1");
    assert!(err.contains("/nonexistent/pm_counters"), "{err}");
    assert!(
        out.contains("config EnergyPmCountersDir=/nonexistent/pm_counters"),
        "{out}"
    );
    let conf = slurm_conf(tmp.path(), PM, "EnergyPmCountersDir=relative\n");
    let (out, err) = finish(driver(None, &conf, "slurmd", "update node"));
    assert!(
        err.contains("invalid EnergyPmCountersDir=relative"),
        "{err}"
    );
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
}
