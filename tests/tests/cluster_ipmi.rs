//! rust_ipmi in a real Slurm cluster: slurmd polls a simulated BMC over RMCP+, steps get
//! node energy from slurmd; sacct against the true integral of the power schedule, and a
//! BMC frozen mid-job while slurmd must keep answering.

use energy_tests as support;

use std::time::Duration;

use support::bmc::BmcSim;
use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::*;

const IPMI: &str = "acct_gather_energy/rust_ipmi";

fn ipmi_cluster(tmp: &std::path::Path, sim: &BmcSim) -> Cluster {
    ipmi_cluster_with(tmp, &sim.acct_gather(""))
}

fn ipmi_cluster_with(tmp: &std::path::Path, acct_gather: &str) -> Cluster {
    Cluster::up(
        tmp,
        &ClusterSpec {
            energy_type: IPMI,
            acct_gather,
            ..ClusterSpec::default()
        },
    )
}

/// Power is 0 W outside the step, so the step, the extern step and the job all see exactly
/// the schedule's energy. In the 300 W phase the BMC answers 65535 W (all ones) for 1.5 s,
/// as one did on a cluster (accounting then charged 154 471 J for 12 003 J): above the
/// bound its DCMI power limit of 800 W sets (1200 W), those readings are not energy, and
/// the job is within the test's 2% of the truth plus the 0.1% a glitch may cost.
#[test]
fn rust_ipmi_job_energy_over_rmcp_plus_matches_the_truth() {
    let Some(tmp) = root_test_dir("rust_ipmi_job_energy_over_rmcp_plus_matches_the_truth") else {
        return;
    };
    let sim = BmcSim::start(&tmp.path().join("bmc"), 0);
    sim.set_power_limit(800);
    let cluster = ipmi_cluster(tmp.path(), &sim);
    let s = |w| sim.set_command(w);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 5; {}; sleep 7; {}; sleep 12; {}; sleep 10; \
         {}; sleep 2'\n",
        s(300),
        sim.glitch_command(65535, 1.5),
        s(220),
        s(340),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.true_joules();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.02 + 0.001);
    }
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("power readings above 1200 W (the BMC's active DCMI power limit of 800 W"),
        "slurmd says the bound and where it comes from"
    );
    assert_eq!(
        log.matches("a reading of 65535 W is above").count(),
        1,
        "the glitch is logged once"
    );
}

/// What an admin who sets only the BMC's address gets: a 40 s job whose power steps from
/// 150 to 350 W mid-job, within 2% (at Slurm's 30 s or our former 10 s default a step cost
/// up to half a period of it: 10%). Then `senergy check --compare` at 200 W: slurmd's
/// figure and the real `ipmitool dcmi power reading` over RMCP+ agree; a stand-in ipmitool
/// reading 20% more (240 W) differs, and the check exits 6.
#[test]
fn at_default_settings_a_power_step_is_within_two_percent() {
    let Some(tmp) = root_test_dir("at_default_settings_a_power_step_is_within_two_percent") else {
        return;
    };
    let sim = BmcSim::start(&tmp.path().join("bmc"), 150);
    let cluster = ipmi_cluster_with(tmp.path(), &sim.acct_gather_defaults());
    let job = cluster.sbatch(&power_step_script(tmp.path(), &sim.set_command(350)));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = power_step_truth(tmp.path(), &sim.power_log());
    let measured = energy_of(&cluster.energy(job), &format!("{job}.0"));
    assert_close("step at defaults", measured, truth, 0.02);

    sim.set(200);
    // slurmd polls every second and integrates: its window must open after its first
    // reading at 200 W, or it holds part of the step down from 350 W
    std::thread::sleep(Duration::from_secs(2));
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Host);
    assert_pair(&compare, IPMI, "bmc", 200.0, "agree");
    assert_eq!(status, Some(0), "{compare:#}");
    let more = [("STANDIN_BMC_WATTS", "240".to_string())];
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Standins(&more));
    let pair = assert_pair(&compare, IPMI, "bmc", 240.0, "differ");
    assert_close(
        "--compare: slurmd against a reader 20% high",
        pair["difference_pct"].as_f64().expect("difference_pct"),
        100.0 * (200.0 - 240.0) / 240.0,
        0.05,
    );
    assert_eq!(
        status,
        Some(6),
        "a pair that differs fails the check: {compare:#}"
    );
}

/// A BMC that stops answering (SIGSTOP) for 15 s in the middle of a job: slurmd answers at
/// once throughout, the log says what happened, the job completes, and accounting holds the
/// energy (the gap is bridged between the readings before and after, at constant power).
#[test]
fn a_frozen_bmc_mid_job_never_slows_slurmd() {
    let Some(tmp) = root_test_dir("a_frozen_bmc_mid_job_never_slows_slurmd") else {
        return;
    };
    let sim = BmcSim::start(&tmp.path().join("bmc"), 0);
    let cluster = ipmi_cluster(tmp.path(), &sim);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 36; {}; sleep 2'\n",
        sim.set_command(260),
        sim.set_command(0)
    ));
    wait_for_power(&sim.power_log(), 0, 260, Duration::from_secs(2));
    sim.freeze();
    let slowest = cluster.slowest_answer(job, Duration::from_secs(15));
    sim.thaw();
    println!("slowest answer while the BMC was frozen: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "an answer took {slowest:?}"
    );
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.true_joules();
    let rows = cluster.energy(job);
    assert_close(
        &format!("{job}.0 across the freeze"),
        energy_of(&rows, &format!("{job}.0")),
        truth,
        0.02,
    );
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("reading power failed"),
        "the failure is logged"
    );
    assert!(
        log.contains("power readings are back"),
        "the recovery is logged"
    );
}

/// slurmd restarted in the middle of a job: its node energy starts again from zero, and
/// the step, which takes the node's energy from slurmd, must neither go negative nor jump:
/// it keeps what it had, adds the new slurmd's figure, and estimates the gap.
#[test]
fn a_slurmd_restart_mid_job_keeps_the_step_energy() {
    let Some(tmp) = root_test_dir("a_slurmd_restart_mid_job_keeps_the_step_energy") else {
        return;
    };
    let sim = BmcSim::start(&tmp.path().join("bmc"), 0);
    let cluster = ipmi_cluster(tmp.path(), &sim);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 30; {}; sleep 2'\n",
        sim.set_command(280),
        sim.set_command(0)
    ));
    // slurmd restarts after measuring the job's power for 6 s, as it has far longer on a
    // real node (before 24.11 the step tells a restart by slurmd's figure falling)
    wait_for_power(&sim.power_log(), 0, 280, Duration::from_secs(6));
    let restart = cluster
        .harness("restart-slurmd")
        .arg("n1")
        .status()
        .expect("restart-slurmd");
    assert!(restart.success());
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.true_joules();
    let rows = cluster.energy(job);
    // the restart's gap (slurmd down, then its first BMC readings) is estimated from the
    // power before it, which is exact at constant power
    assert_close(
        &format!("{job}.0 across a slurmd restart"),
        energy_of(&rows, &format!("{job}.0")),
        truth,
        0.02,
    );
}
