//! A job's owner attacks the figures (issue 27; DESIGN.md §7): what they control (their
//! tasks' environment, process titles, parentage, the number of steps, files in a
//! directory they may write) must change nothing of what any job is charged, nor make
//! slurmd's work or files grow without bound, nor make root write where they point. Each
//! test attacks as the job's owner would and holds the figures to the simulators' truth.

use energy_tests as support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use support::cluster::{Cluster, ClusterSpec, energy_of, mark};
use support::fakegpu::Vendor;
use support::gpu_cluster::{
    GpuUse, Sharing, each_job_its_own_gpu_whatever_its_environment, shared_gpu,
};
use support::shared_node::{RAPL, SIM, TwoJobs, shared_cluster, two_jobs_share_the_node};
use support::*;

/// Two jobs, one GPU each by GRES, one with a forged environment and one with a clean one
/// ([`each_job_its_own_gpu_whatever_its_environment`]): each charged its own GPU's energy
/// (1%), from Slurm's step record.
#[test]
fn a_forged_or_cleaned_gpu_environment_changes_no_jobs_figure() {
    each_job_its_own_gpu_whatever_its_environment(
        "a_forged_or_cleaned_gpu_environment_changes_no_jobs_figure",
        "",
    );
}

/// The processes whose title names a slurmstepd (`slurmstepd: [`), by title: their pids
/// and owners.
fn titled_stepds() -> Vec<(String, u32, u32)> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let title = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Some(at) = title.find("slurmstepd: [") else {
            continue;
        };
        let Ok(meta) = fs::metadata(entry.path()) else {
            continue;
        };
        let name = title[at..]
            .split(']')
            .next()
            .unwrap_or_default()
            .to_string()
            + "]";
        found.push((name, pid, meta.uid()));
    }
    found.sort();
    found
}

/// `EnergyAttribution=shared` over Slurm's cgroups, one spinning job and one sleeping
/// beside it (the shared-node test's pair): the spinning job's owner runs processes
/// titled (`exec -a`) as the sleeping job's batch and extern slurmstepds, started before
/// that job, and as its own batch and srun steps' slurmstepds. Taken for the sleeping job's
/// slurmstepd, one would give that job the spinning job's cgroup (its CPU time, its share);
/// taken for its own, another cgroup of its job. Every figure stays within the shared-node
/// test's bounds of the model (3% over a window, 1% for the sums).
#[test]
fn processes_titled_as_slurmstepds_change_no_jobs_figure() {
    let Some(tmp) = root_test_dir("processes_titled_as_slurmstepds_change_no_jobs_figure") else {
        return;
    };
    let forge = tmp.path().join("forge.sh");
    fs::write(
        &forge,
        format!(
            "#!/bin/sh\n# forge.sh TITLE...: for each TITLE a process of the job's owner (uid \
             {OTHER_UID}) titled TITLE (bash's exec -a), sleeping 60 s\n\
             for t in \"$@\"; do setpriv --reuid={OTHER_UID} --regid={OTHER_UID} --clear-groups \
             bash -c 'exec -a \"$0\" sleep 60' \"$t\" & done\n"
        ),
    )
    .expect("forge.sh");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let cluster = shared_cluster(tmp.path(), "");
    let f = forge.display();
    // the sleeping job is submitted next: its id is this job's plus one
    let batch = format!(
        "V=$(($SLURM_JOB_ID + 1))\nsh {f} \"slurmstepd: [$V.batch]\" \"slurmstepd: [$V.extern]\" \
         \"slurmstepd: [$SLURM_JOB_ID.batch]\"\nsleep 1"
    );
    let step = format!("sh {f} \"slurmstepd: [$SLURM_JOB_ID.0]\"");
    let during = |busy: u32, idle: u32| {
        let titled = titled_stepds();
        let mut missing = Vec::new();
        for name in [
            format!("{idle}.batch"),
            format!("{idle}.extern"),
            format!("{busy}.batch"),
            format!("{busy}.0"),
        ] {
            let title = format!("slurmstepd: [{name}]");
            let of = |forged: bool| -> Vec<u32> {
                titled
                    .iter()
                    .filter(|(t, _, uid)| *t == title && (*uid == OTHER_UID) == forged)
                    .map(|(_, pid, _)| *pid)
                    .collect()
            };
            let (real, forged) = (of(false), of(true));
            println!("{title}: slurmstepd {real:?}, forged (uid {OTHER_UID}) {forged:?}");
            if real.is_empty() || forged.is_empty() {
                missing.push(title);
            }
        }
        assert!(
            missing.is_empty(),
            "not both the real and a forged process: {missing:?}"
        );
    };
    let [busy, idle] = two_jobs_share_the_node(
        &cluster,
        true,
        &TwoJobs {
            busy_batch: &batch,
            busy_step: &step,
            during: Some(&during),
        },
    );
    println!("forged titles: job {busy} (spinning) titled processes as {idle}'s and its own");
}

/// The shard test's two jobs (2 of 4 shards each, one 80% busy, one idle) with Slurm's
/// cgroups, where the busy job's GPU-using process is double-forked (`setsid`, its parent
/// gone: adopted by init, here by the node's supervisor, a subreaper; no slurmstepd among
/// its ancestors, still in its step's cgroup) and goes on using the GPU: the busy job is
/// still charged its use and the idle job only its share of the idle power (1%). (The same
/// with the busy task using the GPU itself passes: 4521 J and 520 J for 4521.4 and 520.4.)
#[test]
fn a_double_forked_gpu_process_is_still_its_jobs() {
    shared_gpu(
        "a_double_forked_gpu_process_is_still_its_jobs",
        &Sharing {
            vendor: Vendor::Nvidia,
            gres: "Name=gpu File={gpu}\nName=shard Count=4 File={gpu}\n",
            node_gres: "gpu:1,shard:4",
            requests: ["shard:2", "shard:2"],
            sm: [80, 0],
            caps: &[],
            mig: None,
            uses: [GpuUse::DoubleForked, GpuUse::Task],
            cgroups: true,
            parts: [(0.5, 1.0), (0.5, 0.0)],
        },
    );
}

/// Steps of the many-steps job, run `PARALLEL` at a time.
const STEPS: usize = 1000;
const PARALLEL: usize = 8;

/// The ledger (`energy-ledger.<context>.json` in slurmd's spool dir) of node 1: its size in
/// bytes and its JSON.
fn ledger(cluster: &Cluster) -> (u64, serde_json::Value) {
    let spool = cluster.dir.join("spool/n1");
    let path = fs::read_dir(&spool)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("energy-ledger.") && n.ends_with(".json"))
        })
        .unwrap_or_else(|| panic!("no ledger in {}", spool.display()));
    let text = fs::read(&path).expect("the ledger");
    let value = serde_json::from_slice(&text).expect("the ledger's JSON");
    (text.len() as u64, value)
}

/// The steps the ledger lists for `job`.
fn ledger_steps(ledger: &serde_json::Value, job: u32) -> usize {
    ledger["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job"].as_u64() == Some(u64::from(job)))
        .map_or(0, |j| j["steps"].as_array().map_or(0, Vec::len))
}

/// Node mode (rust_rapl): a job runs 1 000 short steps (`srun -n1 --exact true`, 8 at a
/// time), then sleeps 70 s at the same power. 60 s after its last step ended, slurmd's
/// ledger lists at most a few dozen of its steps (the ended ones pruned); the job's figure
/// is the node's energy over it (0.5%).
#[test]
fn a_job_of_a_thousand_steps_keeps_the_ledger_small() {
    let Some(tmp) = root_test_dir("a_job_of_a_thousand_steps_keeps_the_ledger_small") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\n",
            sim_args: vec![Some(SIM)],
            cpus: Some(16),
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["all=0"]);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let rounds = STEPS / PARALLEL;
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n{PARALLEL}\n{raplsim} mark {d} many_start\n\
         {raplsim} set {d} package0=200\n\
         for r in $(seq {rounds}); do for i in $(seq {PARALLEL}); do srun -n1 --exact true & done; \
         wait; done\n{raplsim} mark {d} steps_end\nsleep 70\n{raplsim} set {d} package0=0\n\
         {raplsim} mark {d} many_end\n"
    ));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(600);
    while mark(sim, "steps_end").is_none() {
        assert!(
            Instant::now() < deadline,
            "the steps did not end:\n{}",
            cluster.logs()
        );
        sleep(Duration::from_millis(500));
    }
    let steps_took = t0.elapsed();
    let (size_at_end, at_end) = ledger(&cluster);
    println!(
        "{STEPS} steps ({PARALLEL} at a time) took {steps_took:.0?}; the ledger then: {size_at_end} \
         bytes, {} steps of job {job}",
        ledger_steps(&at_end, job)
    );
    sleep(Duration::from_secs(60));
    let (size, later) = ledger(&cluster);
    let kept = ledger_steps(&later, job);
    println!(
        "60 s after the last step: the ledger is {size} bytes, lists {kept} steps of job {job}"
    );
    cluster.wait_job(job, Duration::from_secs(120));
    let ran = cluster
        .energy(job)
        .iter()
        .filter(|(id, _)| {
            id.strip_prefix(&format!("{job}."))
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .count();
    println!("sacct shows {ran} numbered steps of job {job}");
    let truth =
        mark(sim, "many_end").expect("many_end") - mark(sim, "many_start").expect("many_start");
    let got = energy_of(&cluster.energy(job), &job.to_string());
    println!(
        "job {job}: expected {truth:.1} J, got {got:.0} J ({:+.3}%)",
        100.0 * (got - truth) / truth
    );
    assert_eq!(ran, STEPS, "every step ran");
    assert!(
        kept <= 48,
        "60 s after its last step the ledger ({size} bytes) still lists {kept} steps of job {job}"
    );
    assert_close("the job of many steps", got, truth, 0.005);
}

/// A uid of no one on this machine: the job owner's in the attacks (the owner of the
/// processes titled as slurmstepds, the other writer of the metrics file's directory).
const OTHER_UID: u32 = 64_123;

/// Temporary names a writer of `name` might use, where the other writer plants links.
fn plausible_temp_names(name: &str) -> Vec<String> {
    vec![
        format!("{name}.tmp"),
        format!("{name}.new"),
        format!(".{name}.tmp"),
        format!("{name}~"),
        format!("{name}.part"),
    ]
}

/// The other writer, as uid [`OTHER_UID`]: keeps a link to `target` at each of `names` in
/// `dir`, putting it back whenever one is gone or replaced, until killed.
fn plant_links(dir: &Path, names: &[String], target: &Path) -> Child {
    let script = r#"cd "$1" && t=$2 && shift 2 && while :; do
        for n in "$@"; do [ "$(readlink -- "$n")" = "$t" ] || ln -sfn -- "$t" "$n" 2>/dev/null; done
        sleep 0.02; done"#;
    Command::new("setpriv")
        .args([
            &format!("--reuid={OTHER_UID}"),
            &format!("--regid={OTHER_UID}"),
            "--clear-groups",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(dir)
        .arg(target)
        .args(names)
        .stdin(Stdio::null())
        .spawn()
        .expect("setpriv")
}

/// Prometheus's text format, line by line: comments, or a sample `name{labels} value`.
fn assert_prometheus_text(text: &str) {
    assert!(!text.trim().is_empty(), "an empty metrics file");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            series.starts_with("slurm_energy_"),
            "not one of ours: {line:?}"
        );
        assert!(value.parse::<f64>().is_ok(), "not a sample value: {line:?}");
        if let Some(open) = series.find('{') {
            assert!(series.ends_with('}') && open > 0, "bad labels: {line:?}");
        }
    }
}

/// The metrics file (`EnergyMetricsFile`) in a directory another user (the directory's
/// owner) writes too: before and while a job runs, that user keeps symbolic links at the
/// file's plausible temporary names, pointing at a root-owned file outside the directory.
/// After the job that file is byte for byte what it was, and the metrics file is a root-
/// owned regular file in Prometheus's text format with the job's figure (sacct's, 1%).
#[test]
fn links_planted_at_the_metrics_files_temporary_names_are_never_followed() {
    let Some(tmp) =
        root_test_dir("links_planted_at_the_metrics_files_temporary_names_are_never_followed")
    else {
        return;
    };
    // the other user reaches their directory through the test's
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
    let dir = tmp.path().join("textfile");
    fs::create_dir(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(OTHER_UID), Some(OTHER_UID)).expect("chown");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    let outside = tmp.path().join("root-only.conf");
    let original = b"# root's own file, outside the metrics directory\nsecret=42\n".to_vec();
    fs::write(&outside, &original).expect("the outside file");
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o600)).expect("chmod");
    let before = fs::metadata(&outside).expect("metadata");
    let name = "slurm_energy.prom";
    let file = dir.join(name);
    let names = plausible_temp_names(name);
    let mut planter = plant_links(&dir, &names, &outside);
    // the links are in place before slurmd starts
    let until = Instant::now() + Duration::from_secs(10);
    while !names.iter().all(|n| dir.join(n).is_symlink()) {
        assert!(Instant::now() < until, "the other user planted no links");
        sleep(Duration::from_millis(50));
    }
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyMetricsFile={}\n",
                file.display()
            ),
            sim_args: vec![Some(SIM)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["package0=150"]);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{raplsim} set {d} package0=250\nsleep 12\n{raplsim} set {d} package0=150\n"
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    // a few more writes with the links in place, then the other user stops
    cluster.wait_for_rewrites(&file, 3);
    // SAFETY: kill(2) on the planter this test started
    unsafe { libc::kill(planter.id() as i32, libc::SIGKILL) };
    let _ = planter.wait();
    cluster.wait_for_rewrites(&file, 2);
    let links: Vec<String> = names
        .iter()
        .filter(|n| dir.join(n).is_symlink())
        .cloned()
        .collect();
    println!("links left where they were planted: {links:?}");
    let after = fs::read(&outside).expect("the outside file");
    let meta = fs::metadata(&outside).expect("metadata");
    println!(
        "the outside file: {} bytes before, {} after; {}",
        original.len(),
        after.len(),
        if after == original {
            "unchanged".to_string()
        } else {
            format!(
                "now begins {:?}",
                String::from_utf8_lossy(&after[..after.len().min(120)])
            )
        }
    );
    let file_meta = fs::symlink_metadata(&file);
    let text = fs::read_to_string(&file).unwrap_or_default();
    let rows = cluster.energy(job);
    let sacct = energy_of(&rows, &job.to_string());
    let figure = text
        .lines()
        .filter(|l| l.starts_with("slurm_energy_job_joules_total{"))
        .find(|l| l.contains(&format!("jobid=\"{job}\"")))
        .and_then(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok());
    println!(
        "the metrics file: {}, job {job}: {figure:?} J, sacct {sacct} J",
        match &file_meta {
            Ok(m) if m.file_type().is_symlink() => "a symbolic link".to_string(),
            Ok(m) => format!(
                "{} bytes, uid {}, mode {:o}",
                m.len(),
                m.uid(),
                m.mode() & 0o7777
            ),
            Err(e) => e.to_string(),
        }
    );
    assert!(
        after == original,
        "root wrote into the file a planted link points at"
    );
    assert_eq!(
        (meta.uid(), meta.mode(), meta.len()),
        (before.uid(), before.mode(), before.len()),
        "the outside file's owner, mode and size"
    );
    let file_meta = file_meta.expect("the metrics file");
    assert!(
        file_meta.file_type().is_file() && file_meta.uid() == 0,
        "the metrics file is root's regular file"
    );
    assert_prometheus_text(&text);
    let figure = figure.unwrap_or_else(|| panic!("no series of job {job} in:\n{text}"));
    assert_close("the job's figure in the metrics file", figure, sacct, 0.01);
    drop(cluster);
}

/// An ordinary user of the attack tests, added to the cluster's own /etc/passwd.
const MALLORY: (&str, u32) = ("energy_mallory", 7201);

/// /etc/passwd and /etc/group with [`MALLORY`] added, for the cluster's namespace.
fn etc_with_mallory(dir: &Path) {
    fs::create_dir_all(dir).expect("etc dir");
    let (name, uid) = MALLORY;
    for (file, line) in [
        ("passwd", format!("{name}:x:{uid}:{uid}::/tmp:/bin/sh\n")),
        ("group", format!("{name}:x:{uid}:\n")),
    ] {
        let mut text = fs::read_to_string(Path::new("/etc").join(file)).expect("/etc");
        text.push_str(&line);
        fs::write(dir.join(file), text).expect("etc copy");
    }
}

/// The CPU time (s) of a cgroup v1 cpuacct directory.
fn cpuacct_secs(dir: &Path) -> f64 {
    fs::read_to_string(dir.join("cpuacct.usage"))
        .ok()
        .and_then(|t| t.trim().parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

/// Slurm 22.05's cgroup v1 gives a step's directories to the job's owner: their short job
/// makes `step_batch/hide` in cpuacct and freezer, which outlive it, and their busy job's
/// task starts a spinning process that moves itself there (it stays in its job's cpuset),
/// out of its job's directories. Beside it root's sleeping job, each with one CPU, `shared`
/// mode at a steady 300 W (100 W static): the neighbour pays the model's share from the CPU
/// time each job really used (the busy job's own and its hidden process's), within 3
/// points; it paid about half of the node before (the busy job seemed as idle as it).
///
/// Then the busy job ends, its owner's last on the node, and the spinner, out of the job's
/// freezer cgroup, burns on for [`BURN`] (issue 53): its CPU time is no job's, so the
/// sleeping neighbour, alone, pays the static power and its own share of the rest beside
/// the spinner's CPU time (about a third of the node), within 3 points; it paid all the
/// node before. slurmd logs the owner and the leftover directory. From 23.02 root owns the
/// step directories and the `mkdir` fails: the same shares hold (the spinner ends with its
/// job).
#[test]
fn cpu_time_moved_out_of_a_job_is_still_its_owners() {
    let Some(tmp) = root_test_dir("cpu_time_moved_out_of_a_job_is_still_its_owners") else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_mallory(&etc);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution=shared\nEnergyAttributionIdleWatts={}\n",
                support::shared_node::IDLE_WATTS
            ),
            sim_args: vec![Some(SIM)],
            cgroups: support::cluster::Cgroups::V1,
            etc_users: Some(&etc),
            node_freq: 1,
            jobacct_freq: 1,
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    // where the user's jobs say what they did
    let out = tmp.path().join("mallory");
    fs::create_dir_all(&out).expect("out dir");
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).expect("chmod");
    let o = out.display();
    let sbatch = cluster.dir.join("bin/sbatch");
    let (_, uid) = MALLORY;
    let submit = |script: &str, name: &str| -> u32 {
        let path = out.join(format!("{name}.sh"));
        fs::write(&path, script).expect("script");
        let path = path.display().to_string();
        let output = out.join(format!("{name}.out")).display().to_string();
        let run = cluster.client(
            Some((uid, uid)),
            &sbatch,
            &["--parsable", "-o", &output, "--chdir", "/tmp", &path],
        );
        let text = String::from_utf8_lossy(&run.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("sbatch: {text} {}", String::from_utf8_lossy(&run.stderr)))
    };
    // the batch task's directories: cpuacct's `<step_batch>/task_0`, freezer's `<step_batch>`
    let short = submit(
        &format!(
            "#!/bin/sh\n#SBATCH -n1 -c1\n\
             for c in cpuacct freezer; do\n\
             rel=$(sed -n \"s/^[0-9]*:[^:]*$c[^:]*:\\(.*step_batch\\).*$/\\1/p\" /proc/self/cgroup)\n\
             hide=/sys/fs/cgroup/$c$rel/hide\n\
             if mkdir \"$hide\"; then echo \"$hide\" >>{o}/hide; else echo refused >{o}/hide; exit; fi\n\
             done\n"
        ),
        "short",
    );
    cluster.wait_job(short, Duration::from_secs(90));
    let hide = fs::read_to_string(out.join("hide")).expect("the short job's word");
    let hides: Vec<&Path> = hide.lines().map(Path::new).collect();
    let hidden = (hide.trim() != "refused").then(|| hides[0].to_path_buf());
    match &hidden {
        Some(_) => {
            for dir in &hides {
                assert!(dir.is_dir(), "{} outlives its job", dir.display());
                assert_eq!(fs::metadata(dir).expect("hide").uid(), uid);
            }
        }
        None => println!("root owns the step directories here: the user could not hide"),
    }
    // the spinner: into the hiding places (where the user could make them), then spins
    fs::write(
        out.join("burn.sh"),
        format!(
            "#!/bin/sh\nfor h in $(grep -v refused {o}/hide); do echo $$ >\"$h/cgroup.procs\"; done\n\
             echo $$ >{o}/burner\nexec timeout {} sh -c 'while :; do :; done'\n",
            BURN.as_secs() * 4
        ),
    )
    .expect("burn.sh");
    // the cluster's srun (the release's, with its slurm.conf): the user's PATH has none;
    // the task starts the spinner in a session of its own and waits for the test's word
    let srun = cluster.dir.join("bin/srun").display().to_string();
    let busy = submit(
        &format!(
            "#!/bin/sh\n#SBATCH -n1 -c1\n\
             {srun} -n1 sh -c 'setsid sh {o}/burn.sh </dev/null >/dev/null 2>&1 & \
             while [ ! -s {o}/burner ]; do sleep 0.1; done; touch {o}/busy; \
             while [ ! -e {o}/end ]; do sleep 0.2; done'\n"
        ),
        "busy",
    );
    let idle = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\ntouch /dev/null\n\
         i=0; while [ ! -e {o}/done ] && [ $i -lt 600 ]; do sleep 0.5; i=$((i + 1)); done\n"
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("busy").exists() {
        assert!(
            Instant::now() < deadline,
            "the busy job never ran: {}\n{}",
            fs::read_to_string(out.join("busy.out")).unwrap_or_default(),
            cluster.logs()
        );
        sleep(Duration::from_millis(200));
    }
    let steps = [
        vec![format!("{busy}.batch"), format!("{busy}.0")],
        vec![format!("{idle}.batch")],
    ];
    support::shared_node::wait_until_charged(&cluster, &steps, &[busy, idle]);
    sim.set(&[support::shared_node::ON]);
    // live figures: as in the shared-node pair, a window of time past the power step
    sleep(Duration::from_secs(4));
    let job_dir = |job: u32| {
        Path::new("/sys/fs/cgroup/cpuacct")
            .read_dir()
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("slurm"))
            .flat_map(|s| fs::read_dir(s.path()).into_iter().flatten().flatten())
            .map(|u| u.path().join(format!("job_{job}")))
            .find(|p| p.is_dir())
            .unwrap_or_else(|| panic!("no cgroup of job {job}"))
    };
    let (busy_dir, idle_dir) = (job_dir(busy), job_dir(idle));
    let live = |step: &str| -> f64 {
        let text = cluster.run(&["sstat", "-n", "-P", "-j", step, "-o", "ConsumedEnergyRaw"]);
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("sstat {step} said {text:?}"))
    };
    // each job's figure (its steps'), the truth, each job's true CPU time
    let read = || {
        let truth = sim.truth();
        let busy_j = live(&format!("{busy}.batch")) + live(&format!("{busy}.0"));
        let idle_j = live(&format!("{idle}.batch"));
        let hidden_secs = hidden.as_deref().map_or(0.0, cpuacct_secs);
        let cpu = [
            cpuacct_secs(&busy_dir) + hidden_secs,
            cpuacct_secs(&idle_dir),
        ];
        (truth, [busy_j, idle_j], cpu, hidden_secs)
    };
    let (t0, e0, c0, h0) = read();
    sleep(Duration::from_secs(10));
    let (t1, e1, c1, h1) = read();
    let node = t1 - t0;
    let used = [c1[0] - c0[0], c1[1] - c0[1]];
    let charged = [e1[0] - e0[0], e1[1] - e0[1]];
    let static_share = support::shared_node::IDLE_WATTS / 300.0;
    let model = static_share / 2.0 + (1.0 - static_share) * used[1] / (used[0] + used[1]);
    let share = charged[1] / (charged[0] + charged[1]);
    println!(
        "node {node:.0} J; CPU s busy {:.2} (hidden {:.2}), idle {:.2}; charged busy {:.0} J, \
         idle {:.0} J: the neighbour's share {:.1}% for the model's {:.1}%",
        used[0],
        h1 - h0,
        used[1],
        charged[0],
        charged[1],
        100.0 * share,
        100.0 * model
    );
    if hidden.is_some() {
        assert!(h1 - h0 > 1.0, "the busy task ran hidden: {:.2} s", h1 - h0);
    }
    assert!(
        (share - model).abs() <= 0.03,
        "the sleeping neighbour paid {:.1}% of the pair, the model {:.1}%",
        100.0 * share,
        100.0 * model
    );
    assert_close("the pair's sum", charged[0] + charged[1], node, 0.02);
    // the busy job ends, its owner's last; the spinner burns on where it could hide
    fs::write(out.join("end"), "").expect("end");
    cluster.wait_job(busy, Duration::from_secs(90));
    let burner: u32 = fs::read_to_string(out.join("burner"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("the spinner's pid");
    let alive = Path::new(&format!("/proc/{burner}")).exists();
    if hidden.is_some() {
        assert!(alive, "the spinner outlived its job");
    }
    // a sample past the job's end, then the window
    sleep(Duration::from_secs(3));
    let read = || {
        let hidden_secs = hidden.as_deref().map_or(0.0, cpuacct_secs);
        let idle_j = live(&format!("{idle}.batch"));
        (sim.truth(), idle_j, cpuacct_secs(&idle_dir), hidden_secs)
    };
    let (t0, e0, c0, h0) = read();
    sleep(BURN);
    let (t1, e1, c1, h1) = read();
    sim.set(&[support::shared_node::OFF]);
    if alive {
        // SAFETY: kill has no memory preconditions; the pid is the spinner this test started
        unsafe { libc::kill(burner as i32, libc::SIGKILL) };
    }
    fs::write(out.join("done"), "").expect("done");
    let node = t1 - t0;
    let (used, hidden_used, charged) = (c1 - c0, h1 - h0, e1 - e0);
    // the neighbour alone: the static part, and the rest by its CPU time beside the
    // spinner's, no job's
    let model = static_share
        + (1.0 - static_share)
            * if used + hidden_used > 0.0 {
                used / (used + hidden_used)
            } else {
                1.0
            };
    let share = charged / node;
    println!(
        "after the owner's last job: node {node:.0} J over {:?}; CPU s spinner {hidden_used:.2}, \
         neighbour {used:.2}; the neighbour charged {charged:.0} J: {:.1}% of the node for \
         the model's {:.1}%",
        BURN,
        100.0 * share,
        100.0 * model
    );
    if hidden.is_some() {
        assert!(
            hidden_used > BURN.as_secs_f64() / 4.0,
            "the spinner burnt on hidden: {hidden_used:.2} s"
        );
    }
    assert!(
        (share - model).abs() <= 0.03,
        "the sleeping neighbour paid {:.1}% of the node, the model {:.1}%",
        100.0 * share,
        100.0 * model
    );
    if let Some(dir) = &hidden {
        let logs = cluster.logs();
        assert!(
            logs.contains(&format!("uid_{uid} has no job on this node"))
                && logs.contains(&dir.display().to_string()),
            "slurmd did not name the owner and the leftover directory:\n{logs}"
        );
    }
    cluster.wait_job(idle, Duration::from_secs(90));
}

/// How long the spinner burns on after its owner's last job, measured.
const BURN: Duration = Duration::from_secs(20);

/// Issue 53 (rust_gpu, Slurm 22.05's cgroup v1, which gives a step's directories to the
/// job's owner): the owner's short job makes `hide` in each of its batch step's directories
/// (cpuset's given its CPUs and memory nodes), which outlive it; their GPU job, holding the
/// node's one GPU whole, moves its task there, out of every directory of its job, and the
/// task then uses the GPU at 80% SM while the GPU draws 240 W (40 W of it idle power) for
/// 10 s. The job is charged the GPU's whole energy (1%): the use is below its owner's
/// `uid_<U>`, and the owner's present job holding the GPU pays it. It was charged the idle
/// power only before (the use was nobody's). From 23.02 the `mkdir` is refused and the task
/// stays in its job: the same holds.
#[test]
fn gpu_use_moved_out_of_its_job_is_still_its_owners() {
    let Some(tmp) = root_test_dir("gpu_use_moved_out_of_its_job_is_still_its_owners") else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_mallory(&etc);
    let gpu = 3;
    let dev = tmp.path().join("dev/nvidia3");
    support::gpu_cluster::device_file(&dev, 195, gpu);
    let fake = support::fakegpu::FakeGpus::new(Vendor::Nvidia, &[gpu]);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu",
            acct_gather: &format!("{}EnergyGpuIdleWatts=40\n", fake.acct_gather()),
            gres: "gpu:1",
            gres_conf: &format!("AutoDetect=off\nName=gpu File={}\n", dev.display()),
            cgroups: support::cluster::Cgroups::V1,
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    let out = tmp.path().join("mallory");
    fs::create_dir_all(&out).expect("out dir");
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).expect("chmod");
    let o = out.display();
    let sbatch = cluster.dir.join("bin/sbatch");
    let (_, uid) = MALLORY;
    let submit = |script: &str, name: &str| -> u32 {
        let path = out.join(format!("{name}.sh"));
        fs::write(&path, script).expect("script");
        let path = path.display().to_string();
        let output = out.join(format!("{name}.out")).display().to_string();
        let run = cluster.client(
            Some((uid, uid)),
            &sbatch,
            &["--parsable", "-o", &output, "--chdir", "/tmp", &path],
        );
        let text = String::from_utf8_lossy(&run.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("sbatch: {text} {}", String::from_utf8_lossy(&run.stderr)))
    };
    // `hide` in each hierarchy the batch task is in below its step's directory
    let short = submit(
        &format!(
            "#!/bin/sh\n#SBATCH -n1 -c1\n\
             for line in $(cat /proc/self/cgroup); do\n\
             c=${{line#*:}}; c=${{c%%:*}}; rel=${{line#*:*:}}\n\
             case $rel in */step_batch*) ;; *) continue ;; esac\n\
             d=/sys/fs/cgroup/$c${{rel%%/step_batch*}}/step_batch/hide\n\
             mkdir \"$d\" || {{ echo refused >{o}/hide; exit; }}\n\
             if [ -e \"$d/cpuset.cpus\" ]; then cat \"$d/../cpuset.cpus\" >\"$d/cpuset.cpus\"; \
             cat \"$d/../cpuset.mems\" >\"$d/cpuset.mems\"; fi\n\
             echo \"$d\" >>{o}/hide\n\
             done\n"
        ),
        "short",
    );
    cluster.wait_job(short, Duration::from_secs(90));
    let hide = fs::read_to_string(out.join("hide")).expect("the short job's word");
    let refused = hide.trim() == "refused";
    println!("hiding places: {hide}");
    if !refused {
        assert!(
            hide.lines().count() >= 3,
            "cpuacct, cpuset and freezer at least"
        );
    }
    let srun = cluster.dir.join("bin/srun").display().to_string();
    let procs = fake.dir.path().join(format!("procs.{gpu}"));
    let job = submit(
        &format!(
            "#!/bin/sh\n#SBATCH -n1 -c1 --gres=gpu:1\n\
             {srun} -n1 sh -c 'for h in $(grep -v refused {o}/hide); do \
             echo $$ >\"$h/cgroup.procs\" || exit 1; done; cat /proc/$$/cgroup >{o}/moved; \
             echo \"$$ 80\" >>{procs}; touch {o}/using; \
             while [ ! -e {o}/end ]; do sleep 0.2; done'\n",
            procs = procs.display()
        ),
        "gpu",
    );
    cluster.wait_until(
        "the GPU job's task uses the GPU",
        Duration::from_secs(60),
        || out.join("using").exists().then_some(()),
    );
    println!(
        "the task's cgroups: {}",
        fs::read_to_string(out.join("moved")).unwrap_or_default()
    );
    fake.set_power(gpu, 240.0);
    sleep(Duration::from_secs(10));
    fake.set_power(gpu, 0.0);
    sleep(Duration::from_secs(2));
    fs::write(out.join("end"), "").expect("end");
    cluster.wait_job(job, Duration::from_secs(90));
    let truth = fake.truth(gpu, support::fakegpu::now_ns());
    let rows = cluster.energy(job);
    let charged = energy_of(&rows, &job.to_string());
    println!(
        "the GPU drew {truth:.1} J (40 W of 240 W idle); the job holding it was charged \
         {charged:.0} J ({:.1}%)",
        100.0 * charged / truth
    );
    assert_close("the GPU job's energy", charged, truth, 0.01);
    if !refused {
        let logs = cluster.logs();
        assert!(
            logs.contains(&format!("below user {uid}'s")),
            "slurmd did not say the process left its job:\n{logs}"
        );
    }
}
