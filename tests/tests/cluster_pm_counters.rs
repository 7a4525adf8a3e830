//! rust_pm_counters in a real Slurm cluster: slurmd and every slurmstepd read a simulated
//! HPE Cray EX node controller (pmsim, `EnergyPmCountersDir`); sacct against its true
//! joules.

use energy_tests as support;

use std::time::Duration;

use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::pmsim::PmSim;
use support::*;

/// A 40 s job with a power step; 0 W outside the step, so the step, the extern step and
/// the job all see exactly the step's energy, and every step's peak power is the 420 W
/// the node drew at most, though the controller's counters advance only at 10 Hz (a
/// reading is dated by the controller's scan time, so energy and time agree). Then `senergy check --compare` at 350 W:
/// slurmd's figure and the controller's `energy` file read by senergy itself agree.
#[test]
fn rust_pm_counters_job_energy_matches_the_truth() {
    let Some(tmp) = root_test_dir("rust_pm_counters_job_energy_matches_the_truth") else {
        return;
    };
    let sim = PmSim::start(&tmp.path().join("pm"), "--accels 2");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_pm_counters",
            acct_gather: &sim.acct_gather(),
            ..ClusterSpec::default()
        },
    );
    let s = |w| sim.set_command(w);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 20; {}; sleep 16; {}; sleep 2'\n",
        s(300),
        s(420),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.node_truth();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.001);
    }
    let peaks = cluster.peak_watts(job);
    println!("peak powers: {peaks:?}");
    let step = peaks
        .iter()
        .find(|(id, _)| *id == format!("{job}.0"))
        .unwrap_or_else(|| panic!("no peak power for {job}.0 in {peaks:?}"));
    assert_watts("the step's peak", step.1, 420.0, 0.03);
    for (id, watts) in &peaks {
        assert!(
            *watts <= 420.0 * 1.03,
            "{id}'s peak {watts} W is above any power drawn"
        );
    }

    sim.set(350);
    // the window opens on the steady power, as the IPMI and Redfish comparisons' do: opened
    // at the step, slurmd's figure read 393 W for the reader's 350 W once on a loaded
    // machine (24.11.5), a step's edge between the two sides' first samples
    std::thread::sleep(Duration::from_secs(2));
    // the stand-ins answer as their tools do on a node without a BMC or GPUs
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Standins(&[]));
    assert_pair(
        &compare,
        "acct_gather_energy/rust_pm_counters",
        "pm_counters",
        350.0,
        "agree",
    );
    assert_eq!(status, Some(0), "{compare:#}");
}
