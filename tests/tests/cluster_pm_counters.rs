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

/// Jobs whose power falls as their steps end (a real node's falls as its work stops), over
/// a controller that scans ten times a second and dates its values: the batch step of a
/// 40 s job at 200 W then 400 W (issue 53: +2.10% and +2.22%, about a second counted
/// twice), then three srun steps of 2 s at 200 W and 2 s at 400 W, each within 0.5% of
/// the simulator's truth over its life. A step's edge asks slurmd for a figure from a
/// reading taken after its question; the controller's reading just after the question is
/// its scan before, so slurmd samples again for its next scan (before: no step's edge was
/// answered, each step waited 0.4 s and took the last update brought forward at a power
/// that had fallen).
#[test]
fn a_job_whose_power_falls_as_its_steps_end_is_within_half_a_percent() {
    let Some(tmp) =
        root_test_dir("a_job_whose_power_falls_as_its_steps_end_is_within_half_a_percent")
    else {
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
        "#!/bin/sh\n{}; sleep 20; {}; sleep 20; {}\n",
        s(200),
        s(400),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.node_truth();
    let batch = energy_of(&cluster.energy(job), &format!("{job}.batch"));
    println!(
        "batch step: {batch} J for {truth:.1} J, {:+.3}%",
        (batch - truth) / truth * 100.0
    );

    // the truth at each step's start and end: 0 W between the steps
    let marks = sim.dir.join("marks");
    let mark = format!(
        "{} truth {} >>{}",
        bin("pmsim").display(),
        sim.dir.display(),
        marks.display()
    );
    let step = format!(
        "srun -n1 sh -c '{}; sleep 2; {}; sleep 2; {}'",
        s(200),
        s(400),
        s(0)
    );
    let steps = cluster.sbatch(&format!(
        "#!/bin/sh\n{mark}\n{step}\n{mark}\n{step}\n{mark}\n{step}\n{mark}\n"
    ));
    cluster.wait_job(steps, Duration::from_secs(120));
    let text = std::fs::read_to_string(&marks).expect("the marks");
    let at: Vec<f64> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|j| j.parse().ok())
                .unwrap_or_else(|| panic!("a mark {l:?}"))
        })
        .collect();
    assert_eq!(at.len(), 4, "{text}");
    let rows = cluster.energy(steps);
    let mut figures = vec![(format!("{job}.batch"), batch, truth)];
    for k in 0..3 {
        let id = format!("{steps}.{k}");
        figures.push((id.clone(), energy_of(&rows, &id), at[k + 1] - at[k]));
    }
    for (id, figure, truth) in &figures {
        println!(
            "{id}: {figure} J for {truth:.1} J, {:+.3}%",
            (figure - truth) / truth * 100.0
        );
    }
    for (id, figure, truth) in &figures {
        assert_close(id, *figure, *truth, 0.005);
    }
    // every edge was answered by a reading taken after its question
    let log = cluster.log("slurmd-n1.log");
    assert!(
        !log.contains("slurmd did not answer this step's request"),
        "a step's edge went unanswered:\n{log}"
    );
}
