//! What an admin deploys from the README alone, in a real cluster.

use energy_tests as support;

use std::fs;
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec, cgroup_v1_conf, energy_of};
use support::shared_node::{OFF, ON, SIM, cpu_secs, wait_for_learned_static_watts, wait_for_mark};
use support::*;

/// The fenced blocks of README.md's "## Configure" section, in order.
fn readme_configure_blocks() -> Vec<String> {
    let readme = fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Configure\n"))
        .expect("README.md has a \"## Configure\" section");
    section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| {
            block
                .trim_start_matches(|c| c != '\n')
                .trim_start()
                .to_string()
        })
        .collect()
}

/// `key=value` of a block's line, comments and spaces left as printed: the value as Slurm
/// reads it (up to `#`, trimmed).
fn value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = line.split_once('=')?;
    k.trim()
        .eq_ignore_ascii_case(key)
        .then(|| v.split('#').next().unwrap_or_default().trim())
}

/// README.md's three "Configure" blocks (slurm.conf, cgroup.conf, acct_gather.conf), read
/// when the test runs, boot a one-node cluster (rust_rapl over simulated RAPL, cgroup v1)
/// as printed, but for what the test cluster must own or this machine needs:
/// - slurm.conf: `AcctGatherEnergyType`, `AcctGatherNodeFreq` and `JobAcctGatherFrequency`
///   are lines the harness writes; they take the README's values (the harness's
///   `task=N,energy=N` must be the README's). Every other line is appended verbatim after
///   the harness's (Slurm takes the latest of a key given twice: the README's
///   `ProctrackType`, `TaskPlugin`, `JobAcctGatherType` replace the harness's defaults).
/// - cgroup.conf: the README's lines, then the harness's `CgroupPlugin=cgroup/v1` and
///   `CgroupMountpoint` (this machine's controllers are on v1).
/// - acct_gather.conf: the README's lines with `EnergyMetricsFile`'s absolute path moved
///   into the test's directory (same file name), then `EnergyRaplSource=msr`, after the
///   README's `auto`: the simulator's counters are MSR files, and powercap would be this
///   machine's (Slurm takes the latest).
///
/// The README's other plugins' keys (`EnergyRedfishUrl`, `EnergyIPMIHost`) stop both
/// daemons where a plugin registers only its own keys, which this test caught. Then two
/// one-CPU jobs spin side by side (`EnergyAttribution=shared`, as printed) while the node
/// draws 300 W and nothing outside that window, the static power learned at 0 W before it:
/// each job's energy in accounting is the model's share of the simulator's true joules
/// (by the CPU time of its cgroup) within 3%, both within 1% of the truth, as the
/// shared-node tests hold; and slurmd wrote the metrics file at the moved path.
#[test]
fn the_readmes_configuration_boots_slurm_as_printed() {
    let Some(tmp) = root_test_dir("the_readmes_configuration_boots_slurm_as_printed") else {
        return;
    };
    let blocks = readme_configure_blocks();
    let [slurm, cgroup, acct_gather] = &blocks[..] else {
        panic!("README's Configure section has three blocks, not {blocks:?}");
    };

    let (mut energy_type, mut node_freq, mut jobacct_freq) = (None, None, None);
    let mut extra_conf = String::new();
    for line in slurm.lines() {
        if let Some(v) = value(line, "AcctGatherEnergyType") {
            energy_type = Some(v.to_string());
        } else if let Some(v) = value(line, "AcctGatherNodeFreq") {
            node_freq = Some(v.parse::<u32>().expect("AcctGatherNodeFreq"));
        } else if let Some(v) = value(line, "JobAcctGatherFrequency") {
            let n = v
                .strip_prefix("task=")
                .and_then(|v| v.split_once(",energy="))
                .filter(|(task, energy)| task == energy)
                .and_then(|(task, _)| task.parse::<u32>().ok());
            jobacct_freq =
                Some(n.unwrap_or_else(|| {
                    panic!("the harness writes task=N,energy=N, the README {v}")
                }));
        } else {
            extra_conf.push_str(line);
            extra_conf.push('\n');
        }
    }
    let energy_type = energy_type.expect("README's slurm.conf sets AcctGatherEnergyType");
    assert_eq!(energy_type, "acct_gather_energy/rust_rapl");

    let metrics_dir = tmp.path().join("metrics");
    fs::create_dir_all(&metrics_dir).expect("mkdir metrics");
    let mut metrics = None;
    let mut acct = String::new();
    for line in acct_gather.lines() {
        match value(line, "EnergyMetricsFile") {
            Some(path) => {
                let name = Path::new(path).file_name().expect("a file name");
                let moved = metrics_dir.join(name);
                acct.push_str(&line.replace(path, &moved.display().to_string()));
                metrics = Some(moved);
            }
            None => acct.push_str(line),
        }
        acct.push('\n');
    }
    let metrics = metrics.expect("README's acct_gather.conf sets EnergyMetricsFile");
    acct.push_str("EnergyRaplSource=msr\n");
    let cgroup_conf = format!("{cgroup}\n{}", cgroup_v1_conf(""));

    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: &energy_type,
            acct_gather: &acct,
            node_freq: node_freq.expect("README's slurm.conf sets AcctGatherNodeFreq"),
            jobacct_freq: jobacct_freq.expect("README's slurm.conf sets JobAcctGatherFrequency"),
            sim_args: vec![Some(SIM)],
            extra_conf: &extra_conf,
            cgroup_conf: &cgroup_conf,
            ..ClusterSpec::default()
        },
    );
    let logs = cluster.logs();
    assert!(
        !logs.contains("unrecognized key"),
        "a key of the README's is unknown to Slurm:\n{logs}"
    );
    let sim = cluster.sim(1);
    sim.set(&[OFF]);
    two_jobs_side_by_side(&cluster);

    let text = fs::read_to_string(&metrics)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", metrics.display(), cluster.logs()));
    assert!(
        text.contains("slurm_energy_node_joules_total{"),
        "{}:\n{text}",
        metrics.display()
    );
}

/// Two one-CPU jobs spinning side by side; the node draws [`ON`] for 8 s once both run and
/// its static power is learned at 0 W, nothing before or after. Each job's energy in
/// accounting (its extern step's: PrologFlags=Contain) against the model's share of the
/// truth by the CPU time of the jobs' cgroups over the window.
fn two_jobs_side_by_side(cluster: &Cluster) {
    let sim = cluster.sim(1);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let jobs: Vec<u32> = ["a", "b"]
        .iter()
        .map(|name| {
            cluster.sbatch(&format!(
                "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} {name}_in\n\
                 timeout 20 sh -c 'while :; do :; done'\n"
            ))
        })
        .collect();
    wait_for_mark(cluster, "a_in");
    wait_for_mark(cluster, "b_in");
    // a static power learned from this window would take its energy by holdings
    let floor = wait_for_learned_static_watts(cluster);
    assert!(
        floor < 1.0,
        "static power learned at {floor} W while the node drew 0 W"
    );
    let used_before: Vec<f64> = jobs.iter().map(|&j| cpu_secs(j)).collect();
    let on = sim.truth();
    sim.set(&[ON]);
    sleep(Duration::from_secs(8));
    sim.set(&[OFF]);
    let truth = sim.truth() - on;
    let used: Vec<f64> = jobs
        .iter()
        .zip(&used_before)
        .map(|(&j, before)| cpu_secs(j) - before)
        .collect();
    let total_used: f64 = used.iter().sum();
    for &job in &jobs {
        cluster.wait_job(job, Duration::from_secs(60));
    }
    let mut sum = 0.0;
    for (k, &job) in jobs.iter().enumerate() {
        let rows = cluster.energy(job);
        let measured = energy_of(&rows, &job.to_string());
        let predicted = truth * used[k] / total_used;
        println!(
            "job {job}: {measured:.0} J, model {predicted:.0} J ({:+.2}%) of {truth:.0} J, CPU {:.2} s of {total_used:.2} s",
            100.0 * (measured - predicted) / predicted,
            used[k]
        );
        assert_close(&format!("job {job}"), measured, predicted, 0.03);
        sum += measured;
    }
    assert_close("the jobs' sum", sum, truth, 0.01);
}
