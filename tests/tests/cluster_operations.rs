//! What an admin does to a running node: `scontrol reconfigure` after changing
//! acct_gather.conf, and replacing the plugins (an upgrade) under running jobs, on one node
//! in `shared` mode drawing a constant 300 W ([`whole_life_cluster`]), against the truth.

use energy_tests as support;

use std::fs;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cluster, energy_of};
use support::shared_node::{IDLE_WATTS, OFF, ON, whole_life_cluster};
use support::stepds::StepdWatch;
use support::*;

/// The node's power while the jobs run (`ON`).
const WATTS: f64 = 300.0;
/// The jobs' figures together against the node's energy over their lives: as
/// [`support::shared_node::whole_lives`] holds them where extern slurmstepds run no task,
/// and 0.2% more across slurmd's restart.
const SUM_TOLERANCE: f64 = 0.01;

fn figure(cluster: &Cluster, job: u32) -> f64 {
    energy_of(&cluster.energy(job), &job.to_string())
}

/// The cluster's acct_gather.conf, as slurmd and each new slurmstepd read it.
fn set_mode(cluster: &Cluster, mode: &str) {
    let path = cluster.dir.join("etc/acct_gather.conf");
    let text = fs::read_to_string(&path).expect("acct_gather.conf");
    let changed: String = text
        .lines()
        .map(|l| match l.starts_with("EnergyAttribution=") {
            true => format!("EnergyAttribution={mode}\n"),
            false => format!("{l}\n"),
        })
        .collect();
    assert_ne!(
        text, changed,
        "acct_gather.conf has no EnergyAttribution line"
    );
    fs::write(&path, changed).expect("acct_gather.conf");
}

/// The `union` of two lives (their first start to their last end), in seconds.
fn union(a: &stepds::Life, b: &stepds::Life) -> f64 {
    (a.start + a.secs()).max(b.start + b.secs()) - a.start.min(b.start)
}

/// A job runs in `node` mode; the admin sets `EnergyAttribution=shared` and runs `scontrol
/// reconfigure`, which slurmd applies (22.05 reloads its plugins, 23.11 and later restart
/// slurmd); a second job starts beside the first. Each step reads its figure as slurmd's
/// ledger splits, whatever its slurmstepd read in acct_gather.conf (the first job's said
/// `node`): the two jobs together get the node's energy over their lives. Before, the
/// first job's steps went on taking the node's whole energy while slurmd split it.
///
/// Then the plugins are replaced under a running job as an upgrade does (`ci/install.sh`
/// into the plugin directory) and slurmd restarted while a step started after the
/// replacement runs: the job, alone, gets the node's energy over its life and its spinning
/// step most of it, none of them 0 J.
#[test]
fn a_reconfigure_or_an_upgrade_never_sets_slurmd_and_its_steps_apart() {
    let Some(tmp) =
        root_test_dir("a_reconfigure_or_an_upgrade_never_sets_slurmd_and_its_steps_apart")
    else {
        return;
    };
    let cluster = whole_life_cluster(tmp.path(), false);
    let sim = cluster.sim(1);
    sim.set(&[ON]);
    sleep(Duration::from_secs(3));
    let watch = StepdWatch::start();
    let first = cluster.sbatch("#!/bin/sh\n#SBATCH -n1 -c1\nsleep 24\n");
    sleep(Duration::from_secs(4));
    set_mode(&cluster, "shared");
    let logged = cluster.log("slurmd-n1.log").len();
    let reconfigure = cluster
        .harness("reconfigure")
        .status()
        .expect("reconfigure");
    assert!(reconfigure.success(), "scontrol reconfigure failed");
    let second = cluster.sbatch("#!/bin/sh\n#SBATCH -n1 -c1\nsleep 12\n");
    for job in [first, second] {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    sleep(Duration::from_secs(1));
    let (l1, l2) = (
        watch.life(&format!("{first}.extern")),
        watch.life(&format!("{second}.extern")),
    );
    let log = cluster.log("slurmd-n1.log");
    let after = log.get(logged..).unwrap_or_default();
    assert!(
        after.contains("this step follows slurmd"),
        "the first job's slurmstepds did not say they follow slurmd's mode:\n{after}"
    );
    let (e1, e2) = (figure(&cluster, first), figure(&cluster, second));
    let together = union(&l1, &l2);
    println!(
        "after the reconfigure: {first} {e1} J over {:.2} s, {second} {e2} J over {:.2} s; \
         the node's energy over both lives: {:.1} J",
        l1.secs(),
        l2.secs(),
        WATTS * together
    );
    assert_close(
        "two jobs across a reconfigure, together",
        e1 + e2,
        WATTS * together,
        SUM_TOLERANCE,
    );

    // the upgrade: the plugins replaced under a running job, slurmd restarted during a step
    // its new plugin file started
    let stepd = cluster.sbatch(
        "#!/bin/sh\n#SBATCH -n1 -c1\nsleep 6\n\
         srun -n1 -c1 sh -c 'end=$(($(date +%s) + 10)); while [ $(date +%s) -lt $end ]; do :; done'\n\
         sleep 3\n",
    );
    sleep(Duration::from_secs(3));
    let release = cluster.run(&["sinfo", "-V"]);
    let release = release
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('-').next())
        .expect("sinfo -V: slurm X.Y.Z");
    // the directory the cluster loads from (plugin_dir() would copy over the loaded files)
    let plugins = tmp.path().join("plugins");
    let install = Command::new(workspace().join("ci/install.sh"))
        .arg(&plugins)
        // without cargo on its PATH it installs what was built, as under sudo
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env(
            "CARGO_TARGET_DIR",
            target_dir().parent().expect("target dir"),
        )
        .env("SLURM_EXPECTED_VERSION", release)
        .env("BINDIR", tmp.path().join("bin"))
        .output()
        .expect("ci/install.sh");
    assert!(
        install.status.success(),
        "ci/install.sh: {}",
        String::from_utf8_lossy(&install.stderr)
    );
    sleep(Duration::from_secs(6));
    let restart = cluster
        .harness("restart-slurmd")
        .arg("n1")
        .status()
        .expect("restart-slurmd");
    assert!(restart.success(), "slurmd restart failed");
    cluster.wait_job(stepd, Duration::from_secs(120));
    sleep(Duration::from_secs(1));
    let (job_life, step_life) = (
        watch.life(&format!("{stepd}.extern")),
        watch.life(&format!("{stepd}.0")),
    );
    drop(watch);
    sim.set(&[OFF]);
    let rows = cluster.energy(stepd);
    let (job_j, step_j) = (
        energy_of(&rows, &stepd.to_string()),
        energy_of(&rows, &format!("{stepd}.0")),
    );
    println!(
        "across the upgrade: job {stepd} {job_j} J over {:.2} s, its step 0 {step_j} J over \
         {:.2} s (static power {IDLE_WATTS} W)",
        job_life.secs(),
        step_life.secs()
    );
    assert_close(
        "a job alone across the plugins' replacement and slurmd's restart",
        job_j,
        WATTS * job_life.secs(),
        SUM_TOLERANCE,
    );
    // the job's steps split its figure by their CPU time: the spinning step most of it
    assert!(
        step_j > 0.5 * WATTS * step_life.secs() && step_j <= job_j,
        "step {stepd}.0: {step_j} J of the job's {job_j} J, {:.1} J over its life",
        WATTS * step_life.secs()
    );
}
