//! rust_gpu in a real Slurm cluster with GPU GRES: a node with two stand-in NVIDIA GPUs
//! (device files made in a temp dir, gres.conf `File=`), task/cgroup constraining
//! devices, jobs each given one GPU at different powers, each charged its own GPU's
//! energy; and rust_gpu stacked with rust_rapl, where Slurm sums the two.

#[path = "../fakegpu/harness.rs"]
mod fakegpu;
use energy_tests as support;

use std::path::Path;
use std::time::Duration;

use fakegpu::{FakeGpus, Vendor, now_ns};
use support::cluster::{Cluster, ClusterSpec, cgroup_v1_conf, energy_of, mark, phase_commands};
use support::*;

/// The GPUs' minors in NVML's enumeration order: not the gres.conf order, so a mapping
/// by enumeration order would charge each job the other's GPU.
const MINORS: [u32; 2] = [5, 3];

/// Makes `/dev/nvidiaN`-like character devices (major 195) for the gres.conf.
fn device_files(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for minor in MINORS {
        let path = dir.join(format!("nvidia{minor}"));
        let status = std::process::Command::new("mknod")
            .arg(&path)
            .args(["c", "195", &minor.to_string()])
            .status()
            .expect("mknod");
        assert!(status.success(), "mknod {}", path.display());
    }
}

/// Removes the devices cgroups Slurm leaves behind for this cluster's jobs.
fn remove_job_cgroups(first_job: u32) {
    let root = Path::new("/sys/fs/cgroup/devices/slurm");
    let Ok(users) = std::fs::read_dir(root) else {
        return;
    };
    for user in users.flatten() {
        for job in std::fs::read_dir(user.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let ours = job
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("job_"))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|id| (first_job..first_job + 100).contains(&id));
            if ours {
                let steps: Vec<_> = std::fs::read_dir(job.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .collect();
                for step in steps.iter().filter(|s| s.path().is_dir()) {
                    for task in std::fs::read_dir(step.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                    {
                        let _ = std::fs::remove_dir(task.path());
                    }
                    let _ = std::fs::remove_dir(step.path());
                }
                let _ = std::fs::remove_dir(job.path());
            }
        }
    }
}

#[test]
fn jobs_sharing_a_gpu_node_each_get_their_own_gpu_and_stack_with_rapl() {
    let Some(tmp) =
        root_test_dir("jobs_sharing_a_gpu_node_each_get_their_own_gpu_and_stack_with_rapl")
    else {
        return;
    };
    let devices = tmp.path().join("dev");
    device_files(&devices);
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let gres = format!(
        "AutoDetect=off\nName=gpu File={}\nName=gpu File={}\n",
        devices.join("nvidia3").display(),
        devices.join("nvidia5").display()
    );
    let cgroup = cgroup_v1_conf("ConstrainDevices=yes\n");
    let acct_gather = format!("EnergyRaplSource=msr\n{}", fake.acct_gather());
    let extra = "GresTypes=gpu\nTaskPlugin=task/cgroup\n";
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu",
            acct_gather: &acct_gather,
            sim_args: vec![Some("--vendor amd --packages 2 --cpus 2 --esu 16")],
            node_options: "Gres=gpu:2 ",
            gres_conf: &gres,
            cgroup_conf: &cgroup,
            extra_conf: extra,
            ..ClusterSpec::default()
        },
    );
    // the CPUs idle at 0 W until the third job
    let sim = cluster.sim(1);
    sim.set(&["all=0"]);
    let own = |w: f64| fake.set_power_command(&format!("self:{}", devices.display()), w);
    // two jobs at once, one GPU each: each is its GPU's energy
    let gpu_job = |watts: f64| {
        cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH --gres=gpu:1\nsrun -n1 sh -c '{}; sleep 20; {}'\n",
            own(watts),
            own(0.0)
        ))
    };
    let jobs = [gpu_job(150.0), gpu_job(260.0)];
    for job in jobs {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    // then the stacking: CPU power (RAPL) and the GPU's in one job
    let both = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1\nsrun -n1 sh -c '{}; {}; {}'\n",
        own(200.0),
        phase_commands(sim, "cpu", &[("package0=120 package1=90", 12)]),
        own(0.0)
    ));
    // sstat mid-job: Slurm's running sum of the stacked answers is the step's energy so far
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let cpu_start = loop {
        if let Some(j) = mark(sim, "cpu_start") {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "no cpu_start mark");
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(6));
    let (cpu_before, ns_before) = (sim.truth() - cpu_start, now_ns());
    let sstat = cluster.run(&[
        "sstat",
        "-n",
        "-P",
        "-j",
        &format!("{both}.0"),
        "-o",
        "ConsumedEnergyRaw",
    ]);
    let (cpu_after, ns_after) = (sim.truth() - cpu_start, now_ns());
    let live: f64 = sstat
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sstat said {sstat:?}"));
    cluster.wait_job(both, Duration::from_secs(120));
    let end = now_ns();
    // which GPU each job had: the power schedule names it (its first change)
    let log = std::fs::read_to_string(fake.dir.path().join("power.log")).expect("power.log");
    let changes: Vec<(u32, f64)> = log
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?))
        })
        .collect();
    let minor_at = |watts: f64| {
        changes
            .iter()
            .find(|(_, w)| *w == watts)
            .map(|(m, _)| *m)
            .expect("the job set its power")
    };
    let (m150, m260) = (minor_at(150.0), minor_at(260.0));
    assert_ne!(m150, m260, "the two jobs were given different GPUs");
    // the GPUs' schedules, split at the third job's start (its 200 W)
    let third_start: f64 = log
        .lines()
        .find(|l| l.ends_with(" 200"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("third job");
    for (job, minor) in [(jobs[0], m150), (jobs[1], m260)] {
        let truth = fake.truth(minor, third_start - 1.0);
        let rows = cluster.energy(job);
        for id in [format!("{job}.0"), job.to_string()] {
            assert_close(
                &format!("job {id} on GPU {minor}"),
                energy_of(&rows, &id),
                truth,
                0.005,
            );
        }
    }
    let gpu_truth = MINORS
        .iter()
        .map(|&m| fake.truth(m, end) - fake.truth(m, third_start - 1.0))
        .sum::<f64>();
    let cpu_truth =
        mark(sim, "cpu_end").expect("cpu_end") - mark(sim, "cpu_start").expect("cpu_start");
    let gpu_live = |ns: f64| {
        MINORS
            .iter()
            .map(|&m| fake.truth(m, ns) - fake.truth(m, third_start - 1.0))
            .sum::<f64>()
    };
    let (low, high) = (
        cpu_before + gpu_live(ns_before),
        cpu_after + gpu_live(ns_after),
    );
    println!("sstat mid-job: {live} J, true between {low:.1} and {high:.1} J");
    assert!(
        (low * 0.99..=high * 1.01).contains(&live),
        "sstat {live} J, true between {low:.1} and {high:.1} J"
    );
    let rows = cluster.energy(both);
    println!("stacked: CPU {cpu_truth:.1} J + GPU {gpu_truth:.1} J");
    for id in [format!("{both}.0"), both.to_string()] {
        assert_close(
            &format!("stacked {id}"),
            energy_of(&rows, &id),
            cpu_truth + gpu_truth,
            0.005,
        );
    }
    let first_job = cluster.first_job_id();
    drop(cluster);
    remove_job_cgroups(first_job);
}

/// slurmd stops on SIGTERM within a second while an NVML call hangs (a GPU fallen off the
/// bus: the call never returns), and without crashing: the poller is left in its call.
#[test]
fn slurmd_stops_promptly_while_an_nvml_call_hangs() {
    let Some(tmp) = root_test_dir("slurmd_stops_promptly_while_an_nvml_call_hangs") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu",
            acct_gather: &fake.acct_gather(),
            ..ClusterSpec::default()
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    fake.set_mode(MINORS[0], "hang");
    std::thread::sleep(Duration::from_secs(1));
    let took = cluster.stop_slurmd("n1");
    fake.set_mode(MINORS[0], "ok");
    println!("slurmd stopped in {took:?} with an NVML call hanging");
    cluster.assert_stopped_promptly("n1", took);
}
