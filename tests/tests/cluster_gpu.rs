//! rust_gpu in a real Slurm cluster with GPU GRES (stand-in NVIDIA GPUs, device files made
//! in a temp dir, gres.conf `File=`): jobs each given one GPU at different powers, each
//! charged its own GPU's energy, with task/cgroup constraining devices and without any
//! constraint (and a GPU Slurm does not manage, charged to nobody); rust_gpu stacked with
//! rust_rapl, where Slurm sums the two; GPUs shared by `gres/shard` and `gres/mps`, split
//! by the shares held and by use.

use energy_tests as support;

use std::time::Duration;

use energy_tests::fakegpu::{FakeGpus, Vendor, now_ns};
use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{
    Cgroups, Cluster, ClusterSpec, cgroup_v1_conf, energy_of, mark, phase_commands,
};
use support::gpu_cluster::{
    GpuUse, MINORS, Sharing, device_files, each_job_its_own_gpu_whatever_its_environment,
    minor_set_to, shared_gpu, two_gpu_cluster, two_gpu_cluster_with,
};
use support::*;

#[test]
fn jobs_sharing_a_gpu_node_each_get_their_own_gpu_and_stack_with_rapl() {
    let Some(tmp) =
        root_test_dir("jobs_sharing_a_gpu_node_each_get_their_own_gpu_and_stack_with_rapl")
    else {
        return;
    };
    let devices = tmp.path().join("dev");
    device_files(&devices, &MINORS);
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let gres = format!(
        "AutoDetect=off\nName=gpu File={}\nName=gpu File={}\n",
        devices.join("nvidia3").display(),
        devices.join("nvidia5").display()
    );
    let cgroup = cgroup_v1_conf("ConstrainDevices=yes\n");
    let acct_gather = format!("EnergyRaplSource=msr\n{}", fake.acct_gather());
    // the devices constrained by task/cgroup alone
    let extra = "TaskPlugin=task/cgroup\n";
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu",
            acct_gather: &acct_gather,
            sim_args: vec![Some("--vendor amd --packages 2 --cpus 2 --esu 16")],
            gres: "gpu:2",
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
    const CPU_WATTS: f64 = 120.0 + 90.0;
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
    let logged = cluster.log("slurmd-n1.log").len();
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
    // a stacked plugin's sstat figure is its ledger's last sample as it is (the read asks
    // slurmd for a fresh one but never waits: slurmd holds an RPC thread for it): at most
    // a second old (LEDGER_PERIOD) while slurmd keeps up, and as old as the step logs
    // (to 0.1 s) when it is older
    let ages: std::collections::HashMap<String, f64> = unanswered_rings(
        cluster
            .log("slurmd-n1.log")
            .get(logged..)
            .unwrap_or_default(),
        &format!("[{both}.0]"),
    )
    .into_iter()
    .collect();
    let live: f64 = sstat
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sstat said {sstat:?}"));
    cluster.wait_job(both, Duration::from_secs(120));
    let end = now_ns();
    // which GPU each job had: the power schedule names it (its first change)
    let log = std::fs::read_to_string(fake.dir.path().join("power.log")).expect("power.log");
    let (m150, m260) = (minor_set_to(&fake, 150.0), minor_set_to(&fake, 260.0));
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
    // the CPU phase draws CPU_WATTS from cpu_start on
    let cpu_back = |joules: f64, secs: f64| (joules - CPU_WATTS * secs).max(0.0);
    let oldest = |plugin: &str| ages.get(plugin).map_or(1.0, |age| age + 0.05);
    let newest = |plugin: &str| ages.get(plugin).map_or(0.0, |age| age - 0.05);
    let (rapl, gpu) = ("rust_rapl", "rust_gpu");
    let (low, high) = (
        cpu_back(cpu_before, oldest(rapl)) + gpu_live(ns_before - oldest(gpu) * 1e9),
        cpu_back(cpu_after, newest(rapl)) + gpu_live(ns_after - newest(gpu) * 1e9),
    );
    if !ages.is_empty() {
        println!("the ledger was late at the sstat's read: figures as of {ages:?} s ago");
    }
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
    // slurmd is up and its plugin polls the GPUs
    cluster.wait_for_samples(1, 1);
    fake.set_mode(MINORS[0], "hang");
    std::thread::sleep(Duration::from_secs(1));
    let took = cluster.stop_slurmd("n1");
    fake.set_mode(MINORS[0], "ok");
    println!("slurmd stopped in {took:?} with an NVML call hanging");
    cluster.assert_stopped_promptly("n1", took);
}

/// Without `ConstrainDevices` (no task/cgroup at all) every job may open every GPU: each
/// is still charged only the GPU Slurm gave it, found from its allocation. A third GPU
/// that gres.conf does not name, drawing 77 W throughout, is charged to no job. Then
/// `senergy check --compare` with 150 W more on GPU 5: slurmd's figure of the node's GPUs
/// and the stand-in nvidia-smi reading the same fake counters agree.
#[test]
fn without_device_constraints_each_job_pays_only_the_gpu_it_was_given() {
    let Some(tmp) =
        root_test_dir("without_device_constraints_each_job_pays_only_the_gpu_it_was_given")
    else {
        return;
    };
    // NVML enumerates 5, 3 and the unmanaged 7; gres.conf orders 3, 5
    let fake = FakeGpus::new(Vendor::Nvidia, &[5, 3, 7]);
    fake.set_power(7, 77.0);
    let gres_order = [3, 5];
    let cluster = two_gpu_cluster(tmp.path(), &fake);
    let gpu_job = |watts: f64| {
        cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH --gres=gpu:1\nsrun -n1 sh -c '{}; sleep 20; {}'\n",
            fake.set_gres_power_command(&gres_order, watts),
            fake.set_gres_power_command(&gres_order, 0.0)
        ))
    };
    let jobs = [gpu_job(100.0), gpu_job(300.0)];
    for job in jobs {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    let end = now_ns();
    let minors = [minor_set_to(&fake, 100.0), minor_set_to(&fake, 300.0)];
    assert_ne!(
        minors[0], minors[1],
        "the two jobs were given different GPUs"
    );
    for (job, minor) in jobs.into_iter().zip(minors) {
        let truth = fake.truth(minor, end);
        let rows = cluster.energy(job);
        for id in [job.to_string(), format!("{job}.batch"), format!("{job}.0")] {
            assert_close(
                &format!("job {id} on GPU {minor}"),
                energy_of(&rows, &id),
                truth,
                0.005,
            );
        }
    }

    fake.set_power(5, 150.0);
    // the window must open at a sample over the new power alone, or the plugin's side
    // holds part of the step down to it and nvidia-smi's, read a moment later, does not
    // (4.3% apart in a CI run on 26.05.3)
    cluster.wait_past_power_step(1);
    let fake_dir = [("STANDIN_NVIDIA_DIR", fake.dir.path().display().to_string())];
    let (status, compare) = compare_on(&cluster, 1, 3, &Tools::Standins(&fake_dir));
    assert_pair(
        &compare,
        "acct_gather_energy/rust_gpu",
        "nvidia-smi",
        227.0,
        "agree",
    );
    assert_eq!(status, Some(0), "{compare:#}");
}

/// `EnergyStepRecord=no` (a site whose Slurm is patched): Slurm's internal step record is
/// never read, and each job's GPUs come from slurmctld's record of the job
/// (`slurm_load_job`), asked once per job by its first slurmstepd on the node and reused by
/// its later steps. The forged-environment pair: each job is still charged its own GPU
/// (1%), and slurmstepd's log says where the GPUs came from.
#[test]
fn without_the_step_record_each_job_is_charged_its_gpus_from_slurmctlds_record() {
    let Some(up) = each_job_its_own_gpu_whatever_its_environment(
        "without_the_step_record_each_job_is_charged_its_gpus_from_slurmctlds_record",
        "EnergyStepRecord=no\n",
    ) else {
        return;
    };
    let log = up.cluster.log("slurmd-n1.log");
    let from_job: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("(GRES indexes, from slurmctld's job record)"))
        .inspect(|l| println!("{l}"))
        .collect();
    assert!(
        log.contains(
            "EnergyStepRecord=no: Slurm's step record is not read; its GPUs come from \
             slurmctld's job record"
        ) && from_job.len() >= 2,
        "slurmstepd took each job's GPUs from slurmctld's job record:\n{log}"
    );
    assert!(
        !log.contains("Slurm's step record cannot be read")
            && !log.contains("Slurm's step record names"),
        "the step record was never read:\n{log}"
    );
}

/// Two jobs with 2 of a GPU's 4 shards each, one busy (80% SM) and one idle: the GPU's
/// idle power (40 W) by shares, the rest by use; together the GPU's energy.
#[test]
fn jobs_sharing_a_gpu_by_shards_split_it_by_shares_and_use() {
    shared_gpu(
        "jobs_sharing_a_gpu_by_shards_split_it_by_shares_and_use",
        &Sharing {
            vendor: Vendor::Nvidia,
            gres: "Name=gpu File={gpu}\nName=shard Count=4 File={gpu}\n",
            node_gres: "gpu:1,shard:4",
            requests: ["shard:2", "shard:2"],
            sm: [80, 0],
            caps: &[],
            mig: None,
            uses: [GpuUse::Task; 2],
            cgroups: false,
            parts: [(0.5, 1.0), (0.5, 0.0)],
        },
    );
}

/// Without `ConstrainDevices`, a job given no GPU uses the GPU another job holds whole, at
/// 60% SM beside the holder's 20%: the holder pays the GPU's idle power and its own use
/// only (a quarter of the rest), the other job its use (three quarters), within 1%.
#[test]
fn a_job_using_a_gpu_it_was_not_given_pays_for_its_use() {
    shared_gpu(
        "a_job_using_a_gpu_it_was_not_given_pays_for_its_use",
        &Sharing {
            vendor: Vendor::Nvidia,
            gres: "Name=gpu File={gpu}\n",
            node_gres: "gpu:1",
            requests: ["gpu:1", ""],
            sm: [20, 60],
            caps: &[],
            mig: None,
            uses: [GpuUse::Task, GpuUse::Unheld],
            cgroups: false,
            parts: [(1.0, 0.25), (0.0, 0.75)],
        },
    );
}

/// Two jobs holding 25 and 75 of a GPU's 100 MPS shares, neither reporting any use: the
/// GPU by their shares.
#[test]
fn jobs_sharing_a_gpu_by_mps_split_it_by_shares() {
    shared_gpu(
        "jobs_sharing_a_gpu_by_mps_split_it_by_shares",
        &Sharing {
            vendor: Vendor::Nvidia,
            gres: "Name=gpu File={gpu}\nName=mps Count=100 File={gpu}\n",
            node_gres: "gpu:1,mps:100",
            requests: ["mps:25", "mps:75"],
            sm: [0, 0],
            caps: &[],
            mig: None,
            uses: [GpuUse::Task; 2],
            cgroups: false,
            parts: [(0.25, 0.25), (0.75, 0.75)],
        },
    );
}

/// A GPU partitioned into two MIG instances, configured as `MultipleFiles` GRES: one of 42
/// SMs 90% busy, one of 14 SMs 30% busy (GPM). Each job holds one: the GPU's idle power by
/// the instances' sizes, the rest by size times activity.
#[test]
fn jobs_on_mig_instances_split_the_gpu_by_size_and_activity() {
    let gres = shared_gpu(
        "jobs_on_mig_instances_split_the_gpu_by_size_and_activity",
        &Sharing {
            vendor: Vendor::Nvidia,
            gres: "Name=gpu Type=3g.40gb MultipleFiles={gpu},{dev}/nvidia-caps/nvidia-cap21,\
                   {dev}/nvidia-caps/nvidia-cap22\n\
                   Name=gpu Type=1g.10gb MultipleFiles={gpu},{dev}/nvidia-caps/nvidia-cap30,\
                   {dev}/nvidia-caps/nvidia-cap31\n",
            node_gres: "gpu:3g.40gb:1,gpu:1g.10gb:1",
            requests: ["gpu:3g.40gb:1", "gpu:1g.10gb:1"],
            sm: [0, 0],
            caps: &[21, 22, 30, 31],
            mig: Some((
                "1 0 42 90 MIG-fake-3-gi1\n2 0 14 30 MIG-fake-3-gi2\n",
                "gpu3/gi1/access 21\ngpu3/gi1/ci0/access 22\ngpu3/gi2/access 30\n\
                 gpu3/gi2/ci0/access 31\n",
            )),
            uses: [GpuUse::Task; 2],
            cgroups: false,
            // idle power by size (42:14), the rest by size x activity (3780:420)
            parts: [(0.75, 0.9), (0.25, 0.1)],
        },
    );
    if let Some(gres) = gres {
        assert_eq!(gres, ["0", "1"], "GRES indexes in gres.conf's order");
    }
}

/// The same two shard holders on an AMD GPU, whose processes' use is their graphics-engine
/// time (amd-smi's process list): one busy (60%), one at 20%, holding 1 and 3 shards.
#[test]
fn jobs_sharing_an_amd_gpu_by_shards_split_it_by_engine_time() {
    shared_gpu(
        "jobs_sharing_an_amd_gpu_by_shards_split_it_by_engine_time",
        &Sharing {
            vendor: Vendor::Amd,
            gres: "Name=gpu File={gpu}\nName=shard Count=4 File={gpu}\n",
            node_gres: "gpu:1,shard:4",
            requests: ["shard:1", "shard:3"],
            sm: [60, 20],
            caps: &[],
            mig: None,
            uses: [GpuUse::Task; 2],
            cgroups: false,
            // idle power by shares (1:3), the rest by engine time (60:20)
            parts: [(0.25, 0.75), (0.75, 0.25)],
        },
    );
}

/// rust_rapl and rust_gpu stacked with `EnergyAttribution=shared`: two jobs side by side,
/// each with one CPU and one GPU (100 W and 300 W, no device constraint), while the CPUs
/// draw 60 W for 12 s, all of it idle power (`EnergyAttributionIdleWatts` above it): each
/// job gets half the CPUs' energy (they hold the same) and its own GPU's, which Slurm sums.
#[test]
fn stacked_with_rapl_in_shared_mode_a_job_gets_its_cpu_share_and_its_gpus() {
    let Some(tmp) =
        root_test_dir("stacked_with_rapl_in_shared_mode_a_job_gets_its_cpu_share_and_its_gpus")
    else {
        return;
    };
    let devices = tmp.path().join("dev");
    device_files(&devices, &MINORS);
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let gres_order = [3, 5];
    let gres = format!(
        "AutoDetect=off\nName=gpu File={}\nName=gpu File={}\n",
        devices.join("nvidia3").display(),
        devices.join("nvidia5").display()
    );
    let acct_gather = format!(
        "EnergyRaplSource=msr\nEnergyAttribution=shared\nEnergyAttributionIdleWatts=1000\n{}",
        fake.acct_gather()
    );
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu",
            acct_gather: &acct_gather,
            sim_args: vec![Some("--vendor amd --packages 2 --cpus 2 --esu 16")],
            gres: "gpu:2",
            gres_conf: &gres,
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["all=0"]);
    let marker = |name: &str| fake.dir.path().join(name).display().to_string();
    let wait_for = |name: &str| format!("while [ ! -e {} ]; do sleep 0.2; done", marker(name));
    let gpu = |watts: f64| fake.set_gres_power_command(&gres_order, watts);
    let first = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1 --gres=gpu:1\nsrun -n1 sh -c '{}; touch {}; {}; sleep 2; \
         {}; sleep 2; {}; touch {}'\n",
        gpu(100.0),
        marker("first_ready"),
        wait_for("second_ready"),
        phase_commands(sim, "cpu", &[("package0=40 package1=20", 12)]),
        gpu(0.0),
        marker("first_done")
    ));
    let second = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1 --gres=gpu:1\nsrun -n1 sh -c '{}; touch {}; {}; {}'\n",
        gpu(300.0),
        marker("second_ready"),
        wait_for("first_done"),
        gpu(0.0)
    ));
    for job in [first, second] {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    let end = now_ns();
    let cpu = mark(sim, "cpu_end").expect("cpu_end") - mark(sim, "cpu_start").expect("cpu_start");
    for (job, watts) in [(first, 100.0), (second, 300.0)] {
        let gpu_truth = fake.truth(minor_set_to(&fake, watts), end);
        let rows = cluster.energy(job);
        println!("job {job}: CPU {cpu:.1} J / 2 + GPU {gpu_truth:.1} J; {rows:?}");
        assert_close(
            &format!("job {job}: half the CPUs and its GPU"),
            energy_of(&rows, &job.to_string()),
            cpu / 2.0 + gpu_truth,
            0.01,
        );
    }
}

/// Issue 44: a job holding both GPUs whose processes use only the first (GRES 0, GPU 3 at
/// 200 W, 80% SM) while the second (GPU 5) draws 90 W: the metrics file's idle-held GPU
/// figure of the job is GPU 5's energy over the job as the stand-in counted it (1%), its
/// parts (one per GPU, by NVML's order: gpu0 is GPU 5) add up to its energy (0.1%), and
/// that energy is what sacct shows (0.5%).
#[test]
fn a_job_holding_two_gpus_using_one_holds_the_other_idle() {
    let Some(tmp) = root_test_dir("a_job_holding_two_gpus_using_one_holds_the_other_idle") else {
        return;
    };
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let file = tmp.path().join("slurm_energy.prom");
    let cluster = two_gpu_cluster_with(
        tmp.path(),
        &fake,
        &format!("EnergyMetricsFile={}\n", file.display()),
    );
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:2\nsrun -n1 sh -c '{}; {}; {}; sleep 20; {}; {}'\n",
        fake.use_gpu_command(&[3, 5], 80),
        fake.set_power_command("3", 200.0),
        fake.set_power_command("5", 90.0),
        fake.set_power_command("5", 0.0),
        fake.set_power_command("3", 0.0),
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let end = now_ns();
    let text = std::fs::read_to_string(&file).expect("the metrics file");
    let series = |name: &str, label: &str| -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| l.contains(&format!("jobid=\"{job}\"")))
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once(' ')?;
                let at = labels.find(&format!("{label}=\""))? + label.len() + 2;
                let tag = labels[at..].split('"').next()?.to_string();
                Some((tag, value.parse().ok()?))
            })
            .collect()
    };
    let total = series("slurm_energy_job_joules_total", "jobid");
    let parts = series("slurm_energy_job_part_joules_total", "part");
    let idle = series("slurm_energy_job_idle_held_joules_total", "kind");
    println!("job {job}: total {total:?}, parts {parts:?}, idle-held {idle:?}");
    let total = total.first().expect("the job's energy").1;
    let idle_gpu = idle
        .iter()
        .find(|(k, _)| k == "gpu")
        .expect("the job's idle-held GPUs")
        .1;
    let (used, unused) = (fake.truth(3, end), fake.truth(5, end));
    println!(
        "stand-in: GPU 3 (used) {used:.1} J, GPU 5 (held idle) {unused:.1} J; \
         metrics: idle-held {idle_gpu:.1} J ({:+.3}%), parts sum {:.1} J of {total:.1} J",
        100.0 * (idle_gpu - unused) / unused,
        parts.iter().map(|(_, j)| j).sum::<f64>()
    );
    assert_close("the idle-held GPU", idle_gpu, unused, 0.01);
    let part = |name: &str| parts.iter().find(|(p, _)| p == name).map(|(_, j)| *j);
    assert_close("gpu0 (GPU 5)", part("gpu0").expect("gpu0"), unused, 0.01);
    assert_close("gpu1 (GPU 3)", part("gpu1").expect("gpu1"), used, 0.01);
    assert_close(
        "the job's parts",
        parts.iter().map(|(_, j)| j).sum(),
        total,
        0.001,
    );
    let rows = cluster.energy(job);
    assert_close("sacct", energy_of(&rows, &job.to_string()), total, 0.005);
}
