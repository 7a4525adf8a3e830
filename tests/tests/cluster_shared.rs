//! `EnergyAttribution=shared` in a real cluster: Slurm's cgroup v1 plugins track the jobs,
//! the RAPL simulator gives the node's true joules, and the test reads the jobs' cgroup CPU
//! time itself to compute what the model gives each job.

use energy_tests as support;

use std::fs;
use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cgroups, Cluster, ClusterSpec, energy_of, mark};
use support::shared_node::{
    IDLE_WATTS, OFF, ON, RAPL, SIM, TwoJobs, shared_cluster, shared_cluster_on,
    two_jobs_share_the_node, wait_for_mark, whole_life_cluster, whole_lives,
};
use support::*;

/// A job alone gets the node's energy; slurmd restarted mid-job loses nothing counted.
fn a_job_alone(cluster: &Cluster, restart: bool) {
    let sim = cluster.sim(1);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let tag = if restart { "r" } else { "alone" };
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} {tag}_in\nsleep 3\n{raplsim} mark {d} {tag}_start\n\
         {raplsim} set {d} package0=250\nsleep 10\n{raplsim} set {d} package0=0\n\
         {raplsim} mark {d} {tag}_end\nsleep 3\n"
    ));
    wait_for_mark(cluster, &format!("{tag}_start"));
    if restart {
        sleep(Duration::from_secs(4));
        let status = cluster
            .harness("restart-slurmd")
            .arg("n1")
            .status()
            .expect("restart-slurmd");
        assert!(status.success(), "slurmd restart failed");
    }
    cluster.wait_job(job, Duration::from_secs(90));
    let at = |n: &str| mark(sim, &format!("{tag}_{n}")).expect("mark");
    let truth = at("end") - at("start");
    let rows = cluster.energy(job);
    println!("{tag}: {rows:?}, truth {truth:.1} J");
    let tolerance = if restart { 0.01 } else { 0.001 };
    assert_close(
        &format!("{tag} job"),
        energy_of(&rows, &job.to_string()),
        truth,
        tolerance,
    );
}

#[test]
fn shared_node_with_contain() {
    let Some(tmp) = root_test_dir("shared_node_with_contain") else {
        return;
    };
    let cluster = shared_cluster(tmp.path(), "");
    two_jobs_share_the_node(&cluster, true, &TwoJobs::default());
    a_job_alone(&cluster, false);
    a_job_alone(&cluster, true);
}

/// `shared` mode under Slurm's cgroup/v2 (each slurmd on a pure v2 host of its own: no
/// controller, so nothing constrained, but every cgroup's CPU time counted): the busy and
/// the idle job side by side get the model's split of the node's energy from their v2
/// job directories' `cpu.stat`, and a job alone the node's, slurmd restarted or not.
#[test]
fn shared_node_under_cgroup_v2() {
    let Some(tmp) = root_test_dir("shared_node_under_cgroup_v2") else {
        return;
    };
    let plugins = support::cluster::config::Install::from_env().plugin_dir;
    if !plugins.join("cgroup_v2.so").exists() {
        // configure leaves it out without dbus-1's headers (libdbus-1-dev)
        println!(
            "skipped: this Slurm has no cgroup/v2 plugin in {}",
            plugins.display()
        );
        return;
    }
    let cluster = shared_cluster_on(tmp.path(), "", Cgroups::V2);
    two_jobs_share_the_node(&cluster, true, &TwoJobs::default());
    a_job_alone(&cluster, false);
    a_job_alone(&cluster, true);
}

/// The shared half of [`whole_lives`] (it runs alone: its sum is held to 0.2%); the node
/// half runs beside other tests in `cluster_lifecycle`.
#[test]
fn a_job_is_charged_over_its_whole_life_in_shared_mode() {
    let Some(tmp) = root_test_dir("a_job_is_charged_over_its_whole_life_in_shared_mode") else {
        return;
    };
    whole_lives(&whole_life_cluster(tmp.path(), true), true);
}

#[test]
fn shared_node_without_contain() {
    let Some(tmp) = root_test_dir("shared_node_without_contain") else {
        return;
    };
    let cluster = shared_cluster(tmp.path(), "PrologFlags=Alloc\n");
    two_jobs_share_the_node(&cluster, false, &TwoJobs::default());
}

/// Without Slurm's job cgroups (the default cluster: proctrack/linuxproc, task/none),
/// `shared` says once in slurmd's log what is missing and every step gets the node's energy.
#[test]
fn shared_without_cgroups_says_why_and_is_node_wide() {
    let Some(tmp) = root_test_dir("shared_without_cgroups_says_why_and_is_node_wide") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\nEnergyAttribution=shared\n",
            sim_args: vec![Some(SIM)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{raplsim} mark {d} nc_start\n{raplsim} set {d} package0=200\nsleep 6\n\
         {raplsim} set {d} package0=0\n{raplsim} mark {d} nc_end\n"
    ));
    cluster.wait_job(job, Duration::from_secs(60));
    let log = cluster.log("slurmd-n1.log");
    let why = "EnergyAttribution=shared: it needs Slurm's job cgroups: \
               ProctrackType=proctrack/cgroup (it is proctrack/linuxproc)";
    assert!(log.contains(why), "no {why:?} in slurmd's log:\n{log}");
    let truth = mark(sim, "nc_end").expect("end") - mark(sim, "nc_start").expect("start");
    let rows = cluster.energy(job);
    println!("{rows:?}, truth {truth:.1} J");
    assert_close(
        "node-wide job",
        energy_of(&rows, &job.to_string()),
        truth,
        0.01,
    );
}

/// rust_ipmi in shared mode: slurmd polls the BMC every second and its ledger gives the steps
/// their figures (no RPC to slurmd); a job alone whose power steps from 150 to 350 W gets the
/// node's energy within 1%, which its batch and srun steps split.
#[test]
fn shared_rust_ipmi_job_alone_with_a_power_step() {
    let Some(tmp) = root_test_dir("shared_rust_ipmi_job_alone_with_a_power_step") else {
        return;
    };
    let bmc = support::bmc::BmcSim::start(&tmp.path().join("bmc"), 0);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_ipmi",
            acct_gather: &format!(
                "{}EnergyIPMIFrequency=1\nEnergyAttribution=shared\n",
                bmc.acct_gather_defaults()
            ),
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    let s = |w| bmc.set_command(w);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c 'sleep 3; {}; sleep 10; {}; sleep 10; {}; sleep 3'\n",
        s(150),
        s(350),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = bmc.true_joules();
    let rows = cluster.energy(job);
    println!("{rows:?}, truth {truth:.1} J");
    // power polled every second: held to the sampling bound of the schedule, as the
    // node-mode rust_ipmi tests are (+3.5% measured three times with the machine loaded by
    // builds, 0.01% when idle; the cause is not yet traced)
    let bound = power_sampling_bound(&[150, 350], 10.0, 1.0);
    for id in [format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, bound);
    }
    // the batch step and the srun step split the job's share by their CPU time: exactly
    let inner = energy_of(&rows, &format!("{job}.batch")) + energy_of(&rows, &format!("{job}.0"));
    assert_close(
        "batch + srun step",
        inner,
        energy_of(&rows, &format!("{job}.extern")),
        0.001,
    );
}

/// Job `job`'s CPU seconds on node `node`, from that node's own cgroup root (Debian's
/// 22.05 keeps each slurmd's jobs under `<ctrl>/slurm_<node>`).
fn cpu_secs_on(job: u32, node: &str) -> Option<f64> {
    let path = format!("/sys/fs/cgroup/cpuacct/slurm_{node}/uid_0/job_{job}/cpuacct.usage");
    let ns: f64 = fs::read_to_string(path).ok()?.trim().parse().ok()?;
    Some(ns / 1e9)
}

fn wait_for_node_mark(cluster: &Cluster, node: usize, name: &str) {
    cluster.wait_until(
        &format!("mark {name} on n{node}"),
        Duration::from_secs(60),
        || mark(cluster.sim(node), name),
    );
}

/// Invariant e: a 2-node job that spins shares each node with a sleeping one-node job;
/// each slurmd splits its own node and the wide job's figure is the sum of its shares.
/// Needs one cgroup root per slurmd: two test nodes on one host share the kernel's cgroup
/// tree, and only Debian's 22.05 (built for several slurmds per host) names the root per
/// node; elsewhere both nodes' tasks of the wide job would be one cgroup.
#[test]
fn a_two_node_job_gets_its_share_of_each_node() {
    if !root_or_skip("a_two_node_job_gets_its_share_of_each_node") {
        return;
    }
    if slurm_sys::SLURM_VERSION_NUMBER >= 0x170000 {
        println!("skipped: this Slurm keeps every test node's jobs under one cgroup root");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 2,
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution=shared\nEnergyAttributionIdleWatts={IDLE_WATTS}\n"
            ),
            sim_args: vec![Some(SIM); 2],
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    let raplsim = bin("raplsim").display().to_string();
    let root = tmp.path().join("sim").display().to_string();
    let wide = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N2 -n2 -c1\nsrun -N2 -n2 sh -c '{raplsim} mark {root}/$(hostname) wide_in; \
         timeout 30 sh -c \"while :; do :; done\"'\n"
    ));
    let narrow: Vec<u32> = (1..=2)
        .map(|k| {
            cluster.sbatch(&format!(
                "#!/bin/sh\n#SBATCH -w n{k} -n1 -c1\n{raplsim} mark {root}/n{k} narrow_in\nsleep 30\n"
            ))
        })
        .collect();
    for k in 1..=2 {
        wait_for_node_mark(&cluster, k, "wide_in");
        wait_for_node_mark(&cluster, k, "narrow_in");
        // each slurmd charges both jobs from before the power is on
        cluster.wait_for_jobs_in_ledger(k, &[wide, narrow[k - 1]]);
    }
    let cpu = |k: usize| -> [f64; 2] {
        let node = format!("n{k}");
        [wide, narrow[k - 1]].map(|j| {
            cpu_secs_on(j, &node).unwrap_or_else(|| panic!("no cgroup of job {j} on {node}"))
        })
    };
    let before: Vec<([f64; 2], f64)> = (1..=2).map(|k| (cpu(k), cluster.sim(k).truth())).collect();
    for k in 1..=2 {
        cluster.sim(k).set(&[ON]);
    }
    sleep(Duration::from_secs(12));
    for k in 1..=2 {
        cluster.sim(k).set(&[OFF]);
    }
    let after: Vec<([f64; 2], f64)> = (1..=2).map(|k| (cpu(k), cluster.sim(k).truth())).collect();
    // the model per node: power is steady, so the static part is the idle watts'; the two
    // jobs hold one CPU each
    let mut predicted_wide = 0.0;
    let mut truth = 0.0;
    for (k, ((cpu0, e0), (cpu1, e1))) in before.iter().zip(&after).enumerate() {
        let node = e1 - e0;
        let static_j = IDLE_WATTS * node / 300.0;
        let used = [cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]];
        let wide_here = static_j / 2.0 + (node - static_j) * used[0] / (used[0] + used[1]);
        println!(
            "n{}: {node:.0} J, CPU wide {:.2} s narrow {:.2} s, wide's share {wide_here:.0} J",
            k + 1,
            used[0],
            used[1]
        );
        predicted_wide += wide_here;
        truth += node;
    }
    for job in std::iter::once(wide).chain(narrow.iter().copied()) {
        cluster.wait_job(job, Duration::from_secs(90));
    }
    let figure = |j: u32| energy_of(&cluster.energy(j), &j.to_string());
    let (w, n1, n2) = (figure(wide), figure(narrow[0]), figure(narrow[1]));
    println!("final: wide {w:.0} J, narrow {n1:.0} + {n2:.0} J, both nodes' truth {truth:.1} J");
    assert_close("all jobs vs both nodes", w + n1 + n2, truth, 0.01);
    assert_close(
        "the wide job vs its shares of both nodes",
        w,
        predicted_wide,
        0.03,
    );
    assert!(
        w > n1 + n2,
        "the spinning wide job pays more than the sleeping ones"
    );
}
