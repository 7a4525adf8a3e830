//! A job of many nodes, and the records of a thousand nodes' Epilogs, under real Slurm:
//! benchmarks (`--ignored`), not CI's (tens of slurmds take minutes on a small machine).
//! Run as root:
//! `cargo test --release -p energy-tests --test scale -- --ignored --nocapture`
//! (`SCALE_NODES`, default 64; `SCALE_EPILOGS`, default 1 024). Their figures are in
//! BENCHMARKS.md, "A job of many nodes".

use energy_tests as support;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cluster::{Cluster, ClusterSpec, mark};
use support::*;

const RAPL: &str = "acct_gather_energy/rust_rapl";

fn system_comment(cluster: &Cluster, job: u32) -> String {
    let job = job.to_string();
    let out = cluster.run(&["sacct", "-n", "-P", "-X", "-j", &job, "-o", "SystemComment"]);
    out.trim().to_string()
}

/// The job's record as its SystemComment holds it.
fn record(comment: &str) -> Value {
    let json = comment.split_once("senergy=").map_or("null", |(_, j)| j);
    serde_json::from_str(json).unwrap_or(Value::Null)
}

/// The job's figure in node `node`'s ledger.
fn ledger_joules(cluster: &Cluster, node: &str, job: u32) -> f64 {
    let path = cluster
        .dir
        .join(format!("spool/{node}/energy-ledger.0.json"));
    let text = fs::read(&path).expect("the node's ledger");
    let ledger = slurm_energy_logic::Ledger::parse(&text).expect("a ledger the plugin wrote");
    ledger.job(job).expect("the ledger keeps the job").joules
}

/// slurmdbd's count of `kind` RPCs (`sacctmgr show stats`).
fn dbd_rpcs(cluster: &Cluster, kind: &str) -> u64 {
    rpc_count(&cluster.run(&["sacctmgr", "show", "stats"]), kind)
}

/// slurmctld's count of `kind` RPCs (`sdiag`).
fn ctld_rpcs(cluster: &Cluster, kind: &str) -> u64 {
    rpc_count(&cluster.run(&["sdiag"]), kind)
}

/// The count of `kind` in sdiag's or `sacctmgr show stats`' RPC table.
fn rpc_count(stats: &str, kind: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.trim_start().starts_with(kind))
        .and_then(|l| l.split("count:").nth(1))
        .and_then(|c| c.split_whitespace().next())
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds a process has used (user and system), from /proc.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&k| fields.get(k)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Every node of a job of `SCALE_NODES` nodes (64 by default), each its own slurmd with its
/// own simulated meter in its own network namespace, with the shipped Epilog: sacct's
/// energy of the job within 1% of the simulators' truth; every node's figure kept with the
/// job, each its ledger's; `senergy job` gives their sum. Then `SCALE_EPILOGS` (1 024)
/// Epilogs of one job at once, as a job of that many nodes runs them (`SLURM_JOB_NODELIST`
/// of that many names, each node's spool the first node's): every node's figure kept,
/// slurmdbd's writes per node, the longest Epilog, slurmdbd's CPU.
#[test]
#[ignore = "benchmark: tens of slurmds and a thousand Epilogs (about 25 minutes on 2 cores, root)"]
fn a_job_of_many_nodes_and_a_thousand_epilogs() {
    let test = "a_job_of_many_nodes_and_a_thousand_epilogs";
    let Some(tmp) = root_test_dir(test) else {
        return;
    };
    let nodes = env_count("SCALE_NODES", 64);
    let epilogs = env_count("SCALE_EPILOGS", 1024);
    let epilog = shipped_epilog(tmp.path());
    let up = Instant::now();
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes,
            energy_type: RAPL,
            sim_args: vec![Some(INTEL_SERVER); nodes],
            extra_conf: &format!("Epilog={}\n", epilog.display()),
            // the steps' GPUs from slurmctld's job record: what a release whose layout
            // was never measured does, one question per job and node
            acct_gather: "EnergyStepRecord=no\n",
            ..ClusterSpec::default()
        },
    );
    let up = up.elapsed();
    println!("{nodes} nodes up in {:.1} s", up.as_secs_f64());

    let rs = bin("raplsim").display().to_string();
    let root = tmp.path().join("sim").display().to_string();
    // each task drives the simulator of the node it runs on, with its own power
    let task = format!(
        "S={root}/$(hostname); P=$((100 + 3 * SLURM_NODEID)); {rs} mark $S start; \
         {rs} set $S package0=$P package1=$((P / 2)); sleep 10; \
         {rs} set $S package0=$((P + 50)) package1=40; sleep 10; {rs} set $S all=0; {rs} mark $S end"
    );
    let asked_before = ctld_rpcs(&cluster, "REQUEST_JOB_INFO_SINGLE");
    let ran = Instant::now();
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N{nodes} --exclusive\nsrun -N{nodes} -n{nodes} sh -c '{task}'\n"
    ));
    cluster.wait_job(job, Duration::from_secs(600));
    let per_node: Vec<f64> = (1..=nodes)
        .map(|k| {
            let sim = cluster.sim(k);
            mark(sim, "end").expect("end mark") - mark(sim, "start").expect("start mark")
        })
        .collect();
    let truth: f64 = per_node.iter().sum();
    let rows = cluster.energy(job);
    let measured = support::cluster::energy_of(&rows, &format!("{job}.0"));
    let error = 100.0 * (measured - truth) / truth;
    println!(
        "job {job} on {nodes} nodes: step .0 {measured:.0} J for {truth:.1} J ({error:+.3}%), \
         submitted to accounted in {:.1} s",
        ran.elapsed().as_secs_f64()
    );
    assert!(error.abs() < 1.0, "{rows:?}");
    let asked = ctld_rpcs(&cluster, "REQUEST_JOB_INFO_SINGLE") - asked_before;
    println!(
        "slurmctld asked for the job's record {asked} times ({:.2} a node; sdiag's \
         REQUEST_JOB_INFO_SINGLE, EnergyStepRecord=no)",
        asked as f64 / nodes as f64
    );

    // every node's figure kept with the job, each its ledger's
    let names: Vec<String> = (1..=nodes).map(|k| format!("n{k}")).collect();
    let kept = poll_until(Duration::from_secs(120), || {
        let r = record(&system_comment(&cluster, job));
        let n = r["nodes"].as_object().map_or(0, |m| m.len());
        (n == nodes).then_some(r)
    })
    .unwrap_or_else(|| {
        panic!(
            "not every node kept its figure: {}\n{}",
            system_comment(&cluster, job),
            cluster.logs()
        )
    });
    let mut sum = 0.0;
    for name in &names {
        let figure = kept["nodes"][name]["joules"].as_f64().expect("a figure");
        let ledger = ledger_joules(&cluster, name, job);
        assert!(
            (figure - ledger).abs() <= 0.0005,
            "{name}: {figure} J kept, {ledger} J"
        );
        sum += figure;
    }
    let shown = cluster.client(None, &senergy(), &["job", &job.to_string(), "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("senergy job --json");
    let shown = &shown["jobs"][0]["kept"];
    assert_eq!(
        shown["nodes_recorded"].as_u64(),
        Some(nodes as u64),
        "{shown:#}"
    );
    let total = shown["joules"].as_f64().expect("the kept figure");
    assert!((total - sum).abs() < 1e-6, "{shown:#}");
    println!(
        "record: {nodes} of {nodes} nodes, {total:.1} J ({:+.3}% from sacct's job line)",
        100.0 * (total - measured) / measured
    );

    // a thousand nodes' Epilogs at once, against a job of the first node
    let job = cluster.sbatch("#!/bin/sh\n#SBATCH -N1 -w n1\nsleep 3\n");
    cluster.wait_job(job, Duration::from_secs(120));
    let sims: Vec<String> = (1..=epilogs).map(|k| format!("sim{k:04}")).collect();
    let times = tmp.path().join("epilog-times");
    let errors = tmp.path().join("epilog-errors");
    // each simulated node's spool is the first node's, bind-mounted in a mount namespace
    // of the script's own (a link is no spool directory: the ledger's trust rule)
    let spool = cluster.dir.join("spool");
    let script = format!(
        "set -e; for k in $(seq -w 1 {epilogs}); do \
           mkdir -m 0755 {spool}/sim$k; mount --bind {spool}/n1 {spool}/sim$k; \
         done; set +e; \
         for k in $(seq -w 1 {epilogs}); do \
           ( s=$(date +%s.%N); SLURM_JOB_NODELIST='sim[0001-{epilogs:04}]' SLURM_JOB_ID={job} \
             SLURMD_NODENAME=sim$k {senergy} record 2>>{errors}; \
             echo \"$k $s $(date +%s.%N)\" >> {times} ) & \
         done; wait",
        spool = spool.display(),
        senergy = senergy().display(),
        errors = errors.display(),
        times = times.display(),
    );
    let script = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ];
    let dbd = cluster.records().pid("slurmdbd").expect("slurmdbd's pid");
    let writes_before = dbd_rpcs(&cluster, "DBD_MODIFY_JOB");
    let cpu_before = cpu_seconds(dbd);
    let began = Instant::now();
    let out = cluster.client(None, Path::new("/usr/bin/env"), &script);
    let epilogs_ended = began.elapsed();
    assert!(out.status.success(), "{out:?}");
    // the writers the Epilogs started write in their turns (0.3 s each), three at most
    let figure = ledger_joules(&cluster, "n1", job);
    let kept_figure = Some((figure * 1000.0).round() / 1000.0);
    let missing = |kept: &Value| -> Vec<String> {
        sims.iter()
            .filter(|s| kept["nodes"][s.as_str()]["joules"].as_f64() != kept_figure)
            .cloned()
            .collect()
    };
    let bound = Duration::from_millis(300 * 3 * epilogs as u64 + 30_000);
    let complete = poll_until(bound, || {
        let kept = record(&system_comment(&cluster, job));
        missing(&kept).is_empty().then(|| began.elapsed())
    });
    // the writers' last reads back
    std::thread::sleep(Duration::from_secs(3));
    let dbd_cpu = cpu_seconds(dbd) - cpu_before;
    let writes = dbd_rpcs(&cluster, "DBD_MODIFY_JOB") - writes_before;
    let durations: Vec<f64> = fs::read_to_string(&times)
        .expect("the Epilogs' times")
        .lines()
        .filter_map(|l| {
            let f: Vec<f64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (f.len() == 3).then(|| f[2] - f[1])
        })
        .collect();
    let longest = durations.iter().copied().fold(0.0, f64::max);
    let mean = durations.iter().sum::<f64>() / durations.len().max(1) as f64;
    let comment = system_comment(&cluster, job);
    let kept = record(&comment);
    let missing = missing(&kept);
    let folded = kept["folded"]["nodes"].as_str().unwrap_or("");
    println!(
        "{epilogs} Epilogs at once: {} kept of {epilogs}, the record complete {}; {writes} \
         writes to slurmdbd ({:.2} a node); Epilogs {mean:.1} s on average, the longest \
         {longest:.1} s, all ended in {:.1} s; slurmdbd's CPU {dbd_cpu:.1} s; the record {} \
         bytes, parts of {folded:?} folded",
        epilogs - missing.len(),
        complete.map_or("never".to_string(), |t| format!(
            "{:.0} s after they began",
            t.as_secs_f64()
        )),
        writes as f64 / epilogs as f64,
        epilogs_ended.as_secs_f64(),
        comment.len(),
    );
    println!(
        "Epilogs' errors: {}",
        fs::read_to_string(&errors)
            .unwrap_or_default()
            .lines()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    assert!(
        missing.is_empty(),
        "{} nodes not kept: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(writes as f64 <= 2.0 * epilogs as f64, "{writes} writes");
}

/// `mysql` on the cluster's database (slurmdbd.conf's StoragePort, as root): its output.
fn sql(cluster: &Cluster, query: &str) -> String {
    let conf = fs::read_to_string(cluster.dir.join("etc/slurmdbd.conf")).expect("slurmdbd.conf");
    let port = conf
        .lines()
        .find_map(|l| l.strip_prefix("StoragePort="))
        .expect("StoragePort");
    let out = std::process::Command::new("mysql")
        .args([
            "-h",
            "127.0.0.1",
            "-P",
            port.trim(),
            "-u",
            "root",
            "-N",
            "-B",
        ])
        .args(["slurm_acct_db", "-e", query])
        .output()
        .expect("mysql");
    assert!(
        out.status.success(),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cmd` through the cluster's client wrapper: its stdout, wall seconds and peak memory
/// (MiB), as GNU time measures them.
fn timed(cluster: &Cluster, cmd: &[&str]) -> (String, f64, f64) {
    let report = cluster.dir.join("time.out");
    let mut all = vec![
        "/usr/bin/time",
        "-f",
        "%e %M",
        "-o",
        report.to_str().expect("path"),
    ];
    all.extend(cmd);
    let out = cluster.client(None, Path::new("/usr/bin/env"), &all);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = fs::read_to_string(&report).expect("time's report");
    let f: Vec<f64> = said
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        f[0],
        f[1] / 1024.0,
    )
}

/// A year of a site's jobs in accounting: a few real jobs of one node (steps, energy),
/// cloned in slurmdbd's tables into `SCALE_JOBS` (100 000) jobs with their steps, spread
/// over the past year. `senergy usage` and `senergy -a` over the year against `sacct -a`
/// over the same jobs and steps: time and peak memory, and usage's total energy is the
/// sum of sacct's.
#[test]
#[ignore = "benchmark: 100 000 jobs in accounting (about 5 minutes, root)"]
fn senergy_against_sacct_over_a_year_of_jobs() {
    let Some(tmp) = root_test_dir("senergy_against_sacct_over_a_year_of_jobs") else {
        return;
    };
    let jobs = env_count("SCALE_JOBS", 100_000);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            sim_args: vec![Some(INTEL_SERVER)],
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=120", "package1=60"]);
    let templates: Vec<u32> = (0..3)
        .map(|k| cluster.sbatch(&format!("#!/bin/sh\nsrun sleep {}\nsrun true\n", 2 + k)))
        .collect();
    for job in &templates {
        cluster.wait_job(*job, Duration::from_secs(120));
    }
    let name = fs::read_to_string(cluster.dir.join("etc/slurm.conf"))
        .expect("slurm.conf")
        .lines()
        .find_map(|l| l.strip_prefix("ClusterName=").map(str::to_string))
        .expect("ClusterName");
    let columns = |table: &str| -> Vec<String> {
        sql(&cluster, &format!("SHOW COLUMNS FROM {name}_{table}"))
            .lines()
            .filter_map(|l| l.split('\t').next().map(|c| format!("`{c}`")))
            .collect()
    };
    let copies = jobs.div_ceil(templates.len());
    let spacing = 365 * 86400 / copies as i64;
    let shifted = |col: &str, by: &str| format!("IF({col} > 0, {col} - {by}, {col})");
    // the jobs: each template's copy k, its id 100k further, its times k spacings back
    let job_cols: Vec<String> = columns("job_table")
        .into_iter()
        .filter(|c| c != "`job_db_inx`")
        .collect();
    let picked: Vec<String> = job_cols
        .iter()
        .map(|c| match c.trim_matches('`') {
            "id_job" => "j.id_job + 100 * s.seq".to_string(),
            "time_submit" | "time_eligible" | "time_start" | "time_end" | "mod_time" => {
                shifted(&format!("j.{c}"), &format!("s.seq * {spacing}"))
            }
            c => format!("j.{c}"),
        })
        .collect();
    let ids: Vec<String> = templates.iter().map(u32::to_string).collect();
    let made = Instant::now();
    sql(
        &cluster,
        &format!(
            "INSERT INTO {name}_job_table ({}) SELECT {} FROM {name}_job_table j, seq_1_to_{copies} s \
             WHERE j.id_job IN ({})",
            job_cols.join(","),
            picked.join(","),
            ids.join(",")
        ),
    );
    // their steps: the template's, on the copy's row, shifted as it is
    let step_cols = columns("step_table");
    let picked: Vec<String> = step_cols
        .iter()
        .map(|c| match c.trim_matches('`') {
            "job_db_inx" => "n.job_db_inx".to_string(),
            "time_start" | "time_end" | "mod_time" => {
                shifted(&format!("st.{c}"), "(t.time_start - n.time_start)")
            }
            c => format!("st.{c}"),
        })
        .collect();
    sql(
        &cluster,
        &format!(
            "INSERT INTO {name}_step_table ({}) SELECT {} FROM {name}_step_table st \
             JOIN {name}_job_table t ON st.job_db_inx = t.job_db_inx AND t.id_job IN ({}) \
             JOIN {name}_job_table n ON n.id_job > t.id_job AND (n.id_job - t.id_job) % 100 = 0 \
             AND n.id_job - t.id_job <= 100 * {copies}",
            step_cols.join(","),
            picked.join(","),
            ids.join(",")
        ),
    );
    let rows = sql(&cluster, &format!("SELECT COUNT(*) FROM {name}_job_table"));
    let steps = sql(&cluster, &format!("SELECT COUNT(*) FROM {name}_step_table"));
    println!(
        "accounting: {} jobs, {} steps (made in {:.1} s)",
        rows.trim(),
        steps.trim(),
        made.elapsed().as_secs_f64()
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    // sacct's form (no unix seconds), local time
    let local = |t: u64| {
        let out = std::process::Command::new("date")
            .args(["-d", &format!("@{t}"), "+%Y-%m-%dT%H:%M:%S"])
            .output()
            .expect("date");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let (start, end) = (local(now - 366 * 86400), local(now + 60));
    let senergy = senergy();
    let senergy = senergy.to_str().expect("path");
    let (sacct, sacct_s, sacct_mib) =
        timed(&cluster, &["sacct", "-a", "-S", &start, "-E", &end, "-P"]);
    let (_, sacct_x_s, _) = timed(
        &cluster,
        &[
            "sacct",
            "-a",
            "-X",
            "-S",
            &start,
            "-E",
            &end,
            "-P",
            "-o",
            "JobID,End,ConsumedEnergyRaw",
        ],
    );
    let (usage, usage_s, usage_mib) = timed(
        &cluster,
        &[
            senergy,
            "usage",
            "-S",
            &start,
            "-E",
            &end,
            "--csv",
            "--config",
            "/dev/null",
        ],
    );
    let (listed, list_s, list_mib) = timed(
        &cluster,
        &[
            senergy,
            "-a",
            "-S",
            &start,
            "-E",
            &end,
            "--csv",
            "--config",
            "/dev/null",
        ],
    );
    println!(
        "sacct -a: {} lines in {sacct_s:.1} s, {sacct_mib:.0} MiB (-X: {sacct_x_s:.1} s); \
         senergy usage: {usage_s:.1} s ({:.2}x), {usage_mib:.0} MiB; senergy -a: {} lines in \
         {list_s:.1} s ({:.2}x), {list_mib:.0} MiB",
        sacct.lines().count(),
        usage_s / sacct_s,
        listed.lines().count(),
        list_s / sacct_s,
    );
    // one job and a thousand, by id, among the year's: senergy job against sacct -j
    let some: Vec<String> = (1..=copies.min(1_000))
        .map(|k| (templates[0] + 100 * k as u32).to_string())
        .collect();
    let (_, sacct_one_s, _) = timed(&cluster, &["sacct", "-j", &some[0], "-P"]);
    let (one, job_one_s, _) = timed(
        &cluster,
        &[senergy, "job", &some[0], "--csv", "--config", "/dev/null"],
    );
    let list = some.join(",");
    let (sacct_many, sacct_many_s, sacct_many_mib) = timed(&cluster, &["sacct", "-j", &list, "-P"]);
    let mut job_args = vec![senergy, "job"];
    job_args.extend(some.iter().map(String::as_str));
    job_args.extend(["--csv", "--config", "/dev/null"]);
    let (many, job_many_s, job_many_mib) = timed(&cluster, &job_args);
    println!(
        "one job of the year: sacct -j {sacct_one_s:.2} s, senergy job {job_one_s:.2} s \
         ({:.2}x); {} jobs by id: sacct -j {} lines in {sacct_many_s:.1} s, \
         {sacct_many_mib:.0} MiB; senergy job {} lines in {job_many_s:.1} s ({:.2}x), \
         {job_many_mib:.0} MiB",
        job_one_s / sacct_one_s,
        some.len(),
        sacct_many.lines().count(),
        many.lines().count(),
        job_many_s / sacct_many_s,
    );
    assert!(one.contains(&some[0]), "{one}");
    // usage's total is the sum of sacct's job lines' energy over the jobs that ended
    let (by_job, _, _) = timed(
        &cluster,
        &[
            "sacct",
            "-a",
            "-X",
            "-n",
            "-S",
            &start,
            "-E",
            &end,
            "-P",
            "-o",
            "End,ConsumedEnergyRaw",
        ],
    );
    let sacct_total: u64 = by_job
        .lines()
        .filter(|l| !l.starts_with("Unknown"))
        .filter_map(|l| l.split('|').nth(1)?.parse::<u64>().ok())
        .sum();
    let total = usage
        .lines()
        .find(|l| l.starts_with("(all),(all),"))
        .and_then(|l| l.split(',').nth(4)?.parse::<u64>().ok())
        .expect("usage's total line");
    assert_eq!(total, sacct_total, "{usage}");
    assert_eq!(listed.lines().count(), (copies + 1) * templates.len() + 1);
}
