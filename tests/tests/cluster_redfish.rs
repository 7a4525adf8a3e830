//! rust_redfish in a real Slurm cluster: slurmd polls a Redfish server (sushy-static over
//! a mockup whose power redfishsim changes at run time), steps get the node's energy from
//! slurmd; sacct against the true joules.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::redfish::RedfishSim;
use support::*;

/// A 40 s job with a power step read from the legacy Power resource (power integrated,
/// the harder case); 0 W outside the step. In the 300 W phase the service reports 1e12 W
/// for 1.5 s, as one did on a cluster (accounting then charged 2.2e12 J for 12 006 J):
/// above the bound the chassis' PowerCapacityWatts of 800 W sets (1200 W), those readings
/// are not energy, and the job is within the test's 1% of the truth plus the 0.1% a glitch
/// may cost. Then `senergy check --compare` at 250 W: slurmd's figure and senergy's own
/// request to the same service agree.
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
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 2; {}; sleep 8; {}; sleep 12; {}; sleep 16; {}; \
         sleep 3'\n",
        s(300),
        sim.glitch_command(1e12, 1.5),
        s(420),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = sim.truth();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.01 + 0.001);
    }
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("PowerConsumedWatts"),
        "slurmd's log says which resource it reads"
    );
    assert!(
        log.contains("power readings above 1200 W (the chassis' stated PowerCapacityWatts"),
        "slurmd says the bound and where it comes from"
    );
    assert_eq!(
        log.matches("a reading of 1000000000000 W is above").count(),
        1,
        "the glitch is logged once"
    );

    sim.set(250);
    // slurmd polls every 0.25 s and integrates: its window must open after its first
    // reading at 250 W, or it holds part of the step up from 0 W
    sleep(Duration::from_secs(1));
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Standins(&[]));
    assert_pair(
        &compare,
        "acct_gather_energy/rust_redfish",
        "redfish",
        250.0,
        "agree",
    );
    assert_eq!(status, Some(0), "{compare:#}");
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

/// One acct_gather.conf for a cluster whose BMCs are named after their nodes (configless
/// Slurm pushes one file to every node): `EnergyRedfishUrl=http://%n-bmc:PORT`. Two nodes,
/// each with its own BMC that only it reaches (in its network namespace, at the address
/// its /etc/hosts gives `n1-bmc`, `n2-bmc`), at 200 and 320 W during a 2-node step: each
/// node's energy in accounting is its own BMC's.
#[test]
fn each_node_reads_the_bmc_its_name_names() {
    let Some(tmp) = root_test_dir("each_node_reads_the_bmc_its_name_names") else {
        return;
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("addr").port()
    };
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            nodes: 2,
            energy_type: "acct_gather_energy/rust_redfish",
            acct_gather: &format!(
                "EnergyRedfishUrl=http://%n-bmc:{port}\nEnergyRedfishFrequency=0.25\n\
                 EnergyRedfishTimeout=1\n"
            ),
            hosts: "127.0.0.1 n1-bmc\n127.0.0.2 n2-bmc\n",
            ..ClusterSpec::default()
        },
    );
    let bmcs: Vec<RedfishSim> = (1..=2)
        .map(|k| {
            RedfishSim::start_in(
                &tmp.path().join(format!("bmc{k}")),
                "legacy",
                false,
                cluster.node_prefix(k),
                &format!("127.0.0.{k}"),
                port,
            )
        })
        .collect();
    for bmc in &bmcs {
        bmc.set(0);
        bmc.wait_until_polled(0);
    }
    let (on1, on2) = (bmcs[0].set_command(200), bmcs[1].set_command(320));
    let (off1, off2) = (bmcs[0].set_command(0), bmcs[1].set_command(0));
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N2\nsrun -N2 -n2 sh -c 'case $SLURMD_NODENAME in \
         n1) {on1}; sleep 15; {off1};; n2) {on2}; sleep 15; {off2};; esac; sleep 2'\n"
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truths: Vec<f64> = bmcs.iter().map(RedfishSim::truth).collect();
    let out = cluster.run(&[
        "sacct",
        "-j",
        &format!("{job}.0"),
        "-n",
        "-P",
        "-o",
        "TRESUsageInMaxNode,TRESUsageInMax,TRESUsageInMinNode,TRESUsageInMin",
    ]);
    println!("sacct: {out}; truths {truths:?}");
    let line = out.lines().next().expect("the step's line");
    let fields: Vec<&str> = line.split('|').collect();
    let energy = |f: &str| -> String {
        f.split(',')
            .find_map(|kv| kv.strip_prefix("energy="))
            .unwrap_or_else(|| panic!("no energy in {f:?}"))
            .to_string()
    };
    let (max_node, max_j) = (energy(fields[0]), energy(fields[1]));
    let (min_node, min_j) = (energy(fields[2]), energy(fields[3]));
    assert_eq!((min_node.as_str(), max_node.as_str()), ("n1", "n2"));
    let bound = power_sampling_bound(&[200, 320], 15.0, 0.26) + 0.01;
    assert_close("n1's own BMC", min_j.parse().expect("J"), truths[0], bound);
    assert_close("n2's own BMC", max_j.parse().expect("J"), truths[1], bound);
    assert!(
        cluster
            .log("slurmd-n1.log")
            .contains("%n in acct_gather.conf is this node's name, n1;"),
        "slurmd says how it read %n"
    );
}

/// What an admin who sets only the BMC's URL and account gets: power read every 5 s (the
/// default `EnergyRedfishFrequency`), integrated, through a 40 s step whose power steps
/// from 150 to 350 W mid-step. The step's edges are taken at its power (a ring asks for a
/// fresh figure); the 200 W edge costs up to half a period of it: the step within 5%, the
/// bound of one such edge at 5 s (as [`power_sampling_bound`] reckons an edge).
#[test]
fn at_its_default_period_a_power_step_is_within_the_sampling_bound() {
    let Some(tmp) =
        root_test_dir("at_its_default_period_a_power_step_is_within_the_sampling_bound")
    else {
        return;
    };
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "legacy", false);
    sim.set(150);
    let defaults: String = sim
        .acct_gather("")
        .lines()
        .filter(|l| !l.starts_with("EnergyRedfishFrequency="))
        .map(|l| format!("{l}\n"))
        .collect();
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_redfish",
            acct_gather: &defaults,
            ..ClusterSpec::default()
        },
    );
    let job = cluster.sbatch(&power_step_script(tmp.path(), &sim.set_command(350)));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = power_step_truth(tmp.path(), &sim.power_log());
    let measured = energy_of(&cluster.energy(job), &format!("{job}.0"));
    let period = 5.0;
    let bound = 200.0 * period / 2.0 / (150.0 * 20.0 + 350.0 * 20.0);
    println!(
        "Redfish at its default {period} s: the step {measured} J for {truth:.1} J, {:+.2}% \
         (bound {:.1}%)",
        100.0 * (measured - truth) / truth,
        100.0 * bound
    );
    assert_close("step at the default period", measured, truth, bound);
}
