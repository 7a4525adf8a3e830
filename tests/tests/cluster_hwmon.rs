//! rust_hwmon in a real Slurm cluster: a simulated NVIDIA Grace Hopper node (hwmonsim: two
//! superchips, one ACPI power meter a rail, `power1_average` updated once a second) bound
//! over `/sys/class/hwmon` in slurmd's mount namespace (tests/fakehw/node-hook.sh), so the
//! plugin reads its default directory; sacct against the simulator's true joules.

use energy_tests as support;

use std::time::Duration;

use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::hwmonsim::HwmonSim;
use support::*;

const HWMON: &str = "acct_gather_energy/rust_hwmon";

/// The simulator of node n1, where the node hook binds its tree over /sys/class/hwmon.
fn node_sim(tmp: &tempfile::TempDir, args: &str) -> HwmonSim {
    HwmonSim::start(&tmp.path().join("sim/n1"), args)
}

/// A 27 s job with a power step (900 W, then 1 300 W over two modules), 0 W before and after
/// it, so the step, the extern step and the job all see exactly the step's energy: each
/// within 0.5% of the truth, though the meters show means a second late. Then
/// `senergy check --compare` at 1 000 W: slurmd's figure and the module meters' files read
/// by senergy itself agree.
#[test]
fn rust_hwmon_job_energy_on_a_grace_hopper_node_matches_the_truth() {
    let Some(tmp) = root_test_dir("rust_hwmon_job_energy_on_a_grace_hopper_node_matches_the_truth")
    else {
        return;
    };
    let sim = node_sim(&tmp, "--platform gh200 --sockets 2 --interval-ms 1000");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: HWMON,
            acct_gather: "",
            ..ClusterSpec::default()
        },
    );
    let s = |w| sim.set_command(w);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 12; {}; sleep 10; {}; sleep 3'\n",
        s(900),
        s(1300),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.node_truth();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.005);
    }
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains(
            "/power1_average (Module Power Socket 0) + hwmon5/power1_average (Module Power Socket 1)"
        ),
        "slurmd did not read the simulated modules at /sys/class/hwmon:\n{log}"
    );

    sim.set(1000);
    std::thread::sleep(Duration::from_secs(2));
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Standins(&[]));
    assert_pair(&compare, HWMON, "hwmon", 1000.0, "agree");
    assert_eq!(status, Some(0), "{compare:#}");
}
