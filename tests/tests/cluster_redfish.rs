//! rust_redfish in a real Slurm cluster: slurmd polls a Redfish server (sushy-static over
//! a mockup whose power redfishsim changes at run time), steps get the node's energy from
//! slurmd; sacct against the true joules.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::redfish::RedfishSim;
use support::*;

/// A 40 s job with a power step read from the legacy Power resource (power integrated,
/// the harder case); 0 W outside the step.
#[test]
fn rust_redfish_job_energy_matches_the_truth() {
    let Some(tmp) = root_test_dir("rust_redfish_job_energy_matches_the_truth") else {
        return;
    };
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "legacy", false);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_redfish",
            acct_gather: &sim.acct_gather(""),
            ..ClusterSpec::default()
        },
    );
    let s = |w| sim.set_command(w);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 20; {}; sleep 16; {}; sleep 3'\n",
        s(300),
        s(420),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.truth();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.01);
    }
    assert!(
        cluster.log("slurmd-n1.log").contains("PowerConsumedWatts"),
        "slurmd's log says which resource it reads"
    );
}

/// slurmd stops on SIGTERM within a second while its Redfish service is frozen (it accepts
/// connections and never answers, so the poller's request can only time out, here after
/// 10 s), and without crashing: the poller is left to end on its own.
#[test]
fn slurmd_stops_promptly_while_its_bmc_is_frozen() {
    let Some(tmp) = root_test_dir("slurmd_stops_promptly_while_its_bmc_is_frozen") else {
        return;
    };
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "legacy", false);
    let acct_gather = sim
        .acct_gather("")
        .replace("EnergyRedfishTimeout=1\n", "EnergyRedfishTimeout=10\n");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_redfish",
            acct_gather: &acct_gather,
            ..ClusterSpec::default()
        },
    );
    sim.set(200);
    sleep(Duration::from_secs(2));
    sim.freeze();
    // polled every 0.25 s: a request is now waiting on the frozen server
    sleep(Duration::from_secs(1));
    let took = cluster.stop_slurmd("n1");
    sim.thaw();
    println!("slurmd stopped in {took:?} with its BMC frozen");
    cluster.assert_stopped_promptly("n1", took);
}
