//! End to end in a real Slurm cluster on loopback: slurmctld, slurmdbd (MariaDB) and
//! slurmd load the plugin; jobs change the simulated power; sacct, sstat and scontrol are
//! compared with the simulator's true joules.

mod support;

use std::thread::sleep;
use std::time::{Duration, Instant};

use support::cluster::{Cluster, ClusterSpec, mark, phase_commands};
use support::*;

const RAPL: &str = "acct_gather_energy/rust_rapl";
/// AMD counters with a 2^-20 J unit wrap every 4096 J: ~15 s at the power set below.
const AMD_FAST_WRAP: &[&str] = &[
    "--vendor",
    "amd",
    "--packages",
    "2",
    "--cpus",
    "2",
    "--esu",
    "20",
];

fn wait_for_mark(cluster: &Cluster, name: &str, timeout: Duration) -> f64 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(j) = mark(cluster.sim(1), name) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "no mark {name}:\n{}",
            cluster.logs()
        );
        sleep(Duration::from_millis(200));
    }
}

fn scontrol_field(cluster: &Cluster, node: &str, key: &str) -> String {
    let out = cluster.run(&["scontrol", "show", "node", node]);
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .to_string()
}

fn step_energy(rows: &[(String, Option<u64>)], id: &str) -> f64 {
    rows.iter()
        .find(|(i, _)| i == id)
        .and_then(|(_, e)| *e)
        .unwrap_or_else(|| panic!("no energy for {id} in {rows:?}")) as f64
}

/// The acceptance run: a 40 s job over AMD counters that wrap every ~15 s.
#[test]
fn rust_rapl_job_energy_matches_the_truth_on_wrapping_amd_counters() {
    if !root_or_skip("rust_rapl_job_energy_matches_the_truth_on_wrapping_amd_counters") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let plugins = plugin_dir(tmp.path());
    let cluster = Cluster::up(
        tmp.path(),
        &plugins,
        &ClusterSpec {
            nodes: 1,
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\n",
            node_freq: 5,
            jobacct_freq: 5,
            sim_args: vec![Some(AMD_FAST_WRAP.to_vec())],
        },
    );
    let sim = cluster.sim(1);
    let script = format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\nsrun -n1 sh -c '{}'\n",
        phase_commands(
            sim,
            "s0",
            &[
                ("package0=260 package1=280", 14),
                ("package0=150 package1=330", 6)
            ]
        ),
        phase_commands(sim, "s1", &[("package0=300 package1=250", 20)]),
    );
    let job = cluster.sbatch(&script);

    // during the steady 540 W phase: live step energy and node power
    let s0_start = wait_for_mark(&cluster, "s0_start", Duration::from_secs(60));
    sleep(Duration::from_secs(9));
    let before = sim.truth();
    let sstat = cluster.run(&[
        "sstat",
        "-n",
        "-P",
        "-j",
        &format!("{job}.0"),
        "-o",
        "ConsumedEnergyRaw",
    ]);
    let after = sim.truth();
    let live: f64 = sstat
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sstat said {sstat:?}"));
    println!(
        "sstat {live} J, true between {:.1} and {:.1} J",
        before - s0_start,
        after - s0_start
    );
    assert!(
        live >= (before - s0_start) * 0.99 - 1.0 && live <= (after - s0_start) * 1.01 + 1.0,
        "sstat {live} J outside the true {:.1}..{:.1} J",
        before - s0_start,
        after - s0_start
    );
    let watts: f64 = scontrol_field(&cluster, "n1", "CurrentWatts")
        .parse()
        .expect("CurrentWatts");
    println!("CurrentWatts {watts} W, simulated 540 W");
    assert!(
        (watts - 540.0).abs() <= 540.0 * 0.02,
        "CurrentWatts {watts} vs 540 W"
    );

    cluster.wait_job(job, Duration::from_secs(120));
    let rows = cluster.energy(job);
    let at = |name: &str| mark(sim, name).unwrap_or_else(|| panic!("no mark {name}"));
    let steps = [
        (format!("{job}.0"), at("s0_end") - at("s0_start")),
        (format!("{job}.1"), at("s1_end") - at("s1_start")),
        // power is off outside the steps, so these see exactly the steps' energy
        (format!("{job}.batch"), at("s1_end") - at("s0_start")),
        (format!("{job}.extern"), at("s1_end") - at("s0_start")),
        (job.to_string(), at("s1_end") - at("s0_start")),
    ];
    println!(
        "{:<14} {:>12} {:>14} {:>9}",
        "JobID", "sacct J", "true J", "error"
    );
    for (id, truth) in &steps {
        let measured = step_energy(&rows, id);
        println!(
            "{id:<14} {measured:>12.0} {truth:>14.3} {:>8.3}%",
            100.0 * (measured - truth) / truth
        );
    }
    for (id, truth) in &steps {
        assert_close(id, step_energy(&rows, id), *truth, 0.01);
    }
    let ave: f64 = scontrol_field(&cluster, "n1", "AveWatts")
        .parse()
        .expect("AveWatts");
    assert!(ave > 0.0 && ave < 540.0, "AveWatts {ave}");
}
