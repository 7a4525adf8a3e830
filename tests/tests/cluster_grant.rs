//! A job's owner against the grant slurmstepd publishes for slurmd (issue 53, item 6):
//! slurmstepd runs as the step's user, every thread of it, while it opens the step's
//! `--output`, and a FIFO holds that open until the user reads it. The grant written then
//! into root's 0700 directory was refused and lost, and the job's GPU shares were paid by
//! the jobs beside it.

use energy_tests as support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec, energy_of};
use support::fakegpu::{FakeGpus, Vendor, now_ns};
use support::*;

/// The job's owner, added to the cluster's own /etc/passwd.
const OWNER: (&str, u32) = ("energy_fifo", 7202);

/// /etc/passwd and /etc/group with [`OWNER`] added, for the cluster's namespace.
fn etc_with_owner(dir: &Path) {
    fs::create_dir_all(dir).expect("etc dir");
    let (name, uid) = OWNER;
    for (file, line) in [
        ("passwd", format!("{name}:x:{uid}:{uid}::/tmp:/bin/sh\n")),
        ("group", format!("{name}:x:{uid}:\n")),
    ] {
        let mut text = fs::read_to_string(Path::new("/etc").join(file)).expect("/etc");
        text.push_str(&line);
        fs::write(dir.join(file), text).expect("etc copy");
    }
}

/// `EnergyStepRecord=no`: each step's GPUs come from slurmctld's record, asked on a
/// thread of slurmstepd's. Two jobs hold 2 of a GPU's 4 shards each; the owner's job's
/// `--output` is a FIFO the owner opens 30 s after the job starts. Then the GPU draws
/// 40 W (its idle power) for 20 s: each job pays half (1%). Before the fix the owner's
/// grant was refused (EACCES) and lost: the other job was charged 802.0 J for its 401.0 J
/// (+100.0%), the owner's 0 J; after, 400.0 J each for 400.1 J (0.03%), the grant written
/// 30.1 s after its first refusal (22.05.8, 69 s of wall time).
#[test]
fn a_grant_held_back_by_an_output_fifo_still_reaches_slurmd() {
    let Some(tmp) = root_test_dir("a_grant_held_back_by_an_output_fifo_still_reaches_slurmd")
    else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_owner(&etc);
    let gpu = 3;
    let dev = tmp.path().join("dev/nvidia3");
    support::gpu_cluster::device_file(&dev, 195, gpu);
    let fake = FakeGpus::new(Vendor::Nvidia, &[gpu]);
    fake.set_power(gpu, 0.0);
    // slurmctld answers no one for 3 s once the owner's job is on the node, before its
    // batch step starts (its prolog stops it, the test lets it go on): the step's question
    // for its job's record is answered once the step waits on its output, as it is where
    // slurmctld is slow (without a delay the answer wins or loses that race by
    // milliseconds). No extern step: its grant would be the job's, which the batch step
    // reads without asking.
    let (_, uid) = OWNER;
    let pid_file = tmp.path().join("cluster/run/slurmctld.pid");
    let prolog = tmp.path().join("prolog.sh");
    fs::write(
        &prolog,
        format!(
            "#!/bin/sh\n[ \"$SLURM_JOB_UID\" = {uid} ] || exit 0\nkill -STOP $(cat {})\n",
            pid_file.display()
        ),
    )
    .expect("prolog");
    fs::set_permissions(&prolog, fs::Permissions::from_mode(0o755)).expect("chmod");
    let extra_conf = format!("PrologFlags=Serial\nProlog={}\n", prolog.display());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu",
            acct_gather: &format!(
                "{}EnergyGpuIdleWatts=40\nEnergyStepRecord=no\n",
                fake.acct_gather()
            ),
            gres: "gpu:1,shard:4",
            gres_conf: &format!(
                "AutoDetect=off\nName=gpu File={0}\nName=shard Count=4 File={0}\n",
                dev.display()
            ),
            etc_users: Some(&etc),
            extra_conf: &extra_conf,
            ..ClusterSpec::default()
        },
    );
    let out = tmp.path().join("owner");
    fs::create_dir_all(&out).expect("out dir");
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).expect("chmod");
    let o = out.display();
    let wait_end = format!("while [ ! -e {o}/end ]; do sleep 0.2; done");
    // the other job, root's, holding the GPU's other 2 shards
    let other = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=shard:2\ntouch {o}/other_running; {wait_end}\n"
    ));
    wait_until("the other job runs", Duration::from_secs(60), || {
        out.join("other_running").exists().then_some(())
    });
    let fifo = out.join("fifo");
    let made = Command::new("mkfifo")
        .args(["-m", "0666"])
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let script = out.join("owner.sh");
    fs::write(
        &script,
        format!("#!/bin/sh\n#SBATCH --gres=shard:2\ntouch {o}/owner_running; {wait_end}\n"),
    )
    .expect("script");
    let run = cluster.client(
        Some((uid, uid)),
        &cluster.dir.join("bin/sbatch"),
        &[
            "--parsable",
            "-o",
            &fifo.display().to_string(),
            "--chdir",
            "/tmp",
            &script.display().to_string(),
        ],
    );
    let text = String::from_utf8_lossy(&run.stdout);
    let owner: u32 = text
        .trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("sbatch: {text} {}", String::from_utf8_lossy(&run.stderr)));
    let slurmctld = fs::read_to_string(&pid_file).expect("slurmctld's pid");
    let slurmctld = slurmctld.trim();
    wait_until(
        "the owner's prolog stops slurmctld",
        Duration::from_secs(60),
        || {
            let stat = fs::read_to_string(format!("/proc/{slurmctld}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .map(|(_, rest)| rest.starts_with('T'));
            state.unwrap_or(false).then_some(())
        },
    );
    sleep(Duration::from_secs(3));
    let resumed = Command::new("kill")
        .args(["-CONT", slurmctld])
        .status()
        .expect("kill");
    assert!(resumed.success(), "SIGCONT to slurmctld");
    wait_until(
        "the owner's job is running",
        Duration::from_secs(60),
        || {
            let state = cluster.run(&["squeue", "-h", "-j", &owner.to_string(), "-o", "%T"]);
            (state.trim() == "RUNNING").then_some(())
        },
    );
    // slurmstepd waits in open(2) as the owner meanwhile
    sleep(Duration::from_secs(30));
    assert!(
        !out.join("owner_running").exists(),
        "the owner's task ran before its output was opened"
    );
    let mut reader = Command::new("sh")
        .arg("-c")
        .arg(format!("cat {} >/dev/null", fifo.display()))
        .stdin(Stdio::null())
        .spawn()
        .expect("the FIFO's reader");
    wait_until("the owner's task runs", Duration::from_secs(30), || {
        out.join("owner_running").exists().then_some(())
    });
    // slurmd meets the grant within a sample or two
    sleep(Duration::from_secs(3));
    fake.set_power(gpu, 40.0);
    sleep(Duration::from_secs(20));
    fake.set_power(gpu, 0.0);
    sleep(Duration::from_secs(2));
    fs::write(out.join("end"), "").expect("end");
    for job in [other, owner] {
        cluster.wait_job(job, Duration::from_secs(90));
    }
    let _ = reader.wait();
    let truth = fake.truth(gpu, now_ns());
    // the batch steps hold the shards (no extern step carries the jobs' energy)
    let [other_j, owner_j] =
        [other, owner].map(|job| energy_of(&cluster.energy(job), &format!("{job}.batch")));
    let logs = cluster.logs();
    for line in logs
        .lines()
        .filter(|l| l.contains("grant") || l.contains("GPUs"))
    {
        println!("{line}");
    }
    println!(
        "the GPU drew {truth:.1} J at 40 W, all idle power; the other job was charged \
         {other_j:.1} J, the owner's {owner_j:.1} J (half each by the model)"
    );
    assert_close("the other job's energy", other_j, truth / 2.0, 0.01);
    assert_close("the owner's job's energy", owner_j, truth / 2.0, 0.01);
}
