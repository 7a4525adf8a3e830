//! rust_hwmon in a real Slurm cluster: a simulated NVIDIA Grace Hopper node (hwmonsim: ACPI
//! power meters, one a rail, `power1_average` updated once a second) bound over
//! `/sys/class/hwmon` in slurmd's mount namespace (tests/fakehw/node-hook.sh), so the
//! plugin reads its default directory; sacct against the simulator's true joules.

use energy_tests as support;

use std::time::Duration;

use support::check::{Tools, assert_pair, compare_on};
use support::cluster::{Cgroups, Cluster, ClusterSpec, energy_of};
use support::fakegpu::{FakeGpus, Vendor, now_ns};
use support::gpu_cluster::device_files;
use support::hwmonsim::HwmonSim;
use support::*;

const HWMON: &str = "acct_gather_energy/rust_hwmon";

/// The simulator of node n1, where the node hook binds its tree over /sys/class/hwmon.
fn node_sim(tmp: &tempfile::TempDir, args: &str) -> HwmonSim {
    HwmonSim::start(&tmp.path().join("sim/n1"), args)
}

/// A shared node (`EnergyAttribution=shared`, no static power: all of it is split by CPU
/// time): a 27 s job that keeps a CPU busy while the node's power steps (900 W, then
/// 1 300 W over two modules; 0 W before and after it), beside an idle job holding the other
/// CPU over the same time. The busy job's step, extern step and the job each get the node's
/// energy within 0.5% of the truth, though the meters show means a second late; the idle
/// one next to nothing (0.5% of it). Then `senergy check --compare` at 1 000 W: slurmd's
/// figure and the module meters' files read by senergy itself agree.
#[test]
fn rust_hwmon_job_energy_on_a_shared_grace_hopper_node_matches_the_truth() {
    let Some(tmp) =
        root_test_dir("rust_hwmon_job_energy_on_a_shared_grace_hopper_node_matches_the_truth")
    else {
        return;
    };
    let sim = node_sim(&tmp, "--platform gh200 --sockets 2 --interval-ms 1000");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: HWMON,
            acct_gather: "EnergyAttribution=shared\nEnergyAttributionIdleWatts=0\n",
            cgroups: Cgroups::V1,
            cpus: Some(2),
            ..ClusterSpec::default()
        },
    );
    let s = |w| sim.set_command(w);
    let idle = cluster.sbatch("#!/bin/sh\n#SBATCH -n1\nsrun -n1 sleep 29\n");
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1\nsrun -n1 sh -c 'timeout 28 sh -c \"while :; do :; done\" & \
         sleep 2; {}; sleep 12; {}; sleep 10; {}; sleep 3; wait'\n",
        s(900),
        s(1300),
        s(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    cluster.wait_job(idle, Duration::from_secs(60));
    let truth = sim.node_truth();
    let rows = cluster.energy(job);
    for id in [format!("{job}.0"), format!("{job}.extern"), job.to_string()] {
        assert_close(&id, energy_of(&rows, &id), truth, 0.005);
    }
    let idle_joules = energy_of(&cluster.energy(idle), &idle.to_string());
    println!("the idle job: {idle_joules} J of the node's {truth:.1} J");
    assert!(
        idle_joules <= truth * 0.005 + 1.0,
        "the idle job was charged {idle_joules} J of {truth:.1} J"
    );
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

/// rust_gpu stacked before rust_hwmon on a GH200 node: the stand-in NVML names its GPU as a
/// GH200's does and counts the module's power (NVML's counter covers the whole module),
/// which the module's meter shows too. A job holding the GPU is charged the module once
/// (0.5% of its truth), not twice: rust_hwmon leaves the module to rust_gpu and says so.
#[test]
fn rust_hwmon_stacked_with_rust_gpu_on_a_gh200_counts_the_module_once() {
    let Some(tmp) =
        root_test_dir("rust_hwmon_stacked_with_rust_gpu_on_a_gh200_counts_the_module_once")
    else {
        return;
    };
    let sim = node_sim(&tmp, "--platform gh200 --sockets 1 --interval-ms 1000");
    let fake = FakeGpus::new(Vendor::Nvidia, &[3]);
    fake.set_name(3, "NVIDIA GH200 480GB");
    let devices = tmp.path().join("dev");
    device_files(&devices, &[3]);
    let gres = format!(
        "AutoDetect=off\nName=gpu File={}\n",
        devices.join("nvidia3").display()
    );
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu,acct_gather_energy/rust_hwmon",
            acct_gather: &fake.acct_gather(),
            gres: "gpu:1",
            gres_conf: &gres,
            ..ClusterSpec::default()
        },
    );
    // the module's power, as its meter and the GPU's counter both see it
    let both = |w: u32| {
        format!(
            "{}; {}",
            sim.set_command(w),
            fake.set_power_command("3", f64::from(w))
        )
    };
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1\nsrun -n1 sh -c 'sleep 2; {}; sleep 8; {}; sleep 8; {}; sleep 3'\n",
        both(450),
        both(650),
        both(0)
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let module = sim.node_truth();
    let gpu = fake.truth(3, now_ns());
    println!("the module's truth {module:.1} J, the GPU counter's {gpu:.1} J");
    let rows = cluster.energy(job);
    assert_close(
        &job.to_string(),
        energy_of(&rows, &job.to_string()),
        module,
        0.005,
    );
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("rust_hwmon: measuring hwmon: no sensor counted: stacked with rust_gpu"),
        "{log}"
    );
    assert!(
        log.contains("its energy counter covers the whole Grace Hopper module"),
        "{log}"
    );
}
