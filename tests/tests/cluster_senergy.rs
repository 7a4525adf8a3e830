//! senergy against a private cluster's slurmdbd: per-node truth from the RAPL simulator,
//! sacct's own figures, emissions and cost to the formula, a period report, and
//! PrivateData with real Unix users (in a private mount namespace, /etc untouched).

use energy_tests as support;

use std::fs;
use std::time::Duration;

use serde_json::Value;
use support::cluster::{Cluster, ClusterSpec, energy_of, mark};
use support::*;

const RAPL: &str = "acct_gather_energy/rust_rapl";

fn json(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "senergy failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn step<'a>(job: &'a Value, name: &str) -> &'a Value {
    job["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["step"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {job}"))
}

fn assert_formula(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want.abs() * 1e-9,
        "{what}: {got} != {want}"
    );
}

/// A 3-node job of two steps whose nodes draw different power in each, and a job array:
/// senergy's totals are sacct's, the min and max nodes are the ones the simulators say,
/// each node's figure matches its truth, emissions and cost follow the formula.
#[test]
fn job_report_names_the_right_nodes_and_matches_sacct() {
    let Some(tmp) = root_test_dir("job_report_names_the_right_nodes_and_matches_sacct") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 3,
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER); 3],
            ..ClusterSpec::default()
        },
    );
    let rs = bin("raplsim").display().to_string();
    let root = tmp.path().join("sim").display().to_string();
    // step 0: n3 draws most, n1 least; step 1: the other way round
    let phase = |name: &str, watts: &str| {
        format!(
            "S={root}/$(hostname); {rs} mark $S {name}_start; \
             {rs} set $S package0=$(({watts})) package1=20; sleep 8; {rs} set $S all=0; \
             {rs} mark $S {name}_end"
        )
    };
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N3 --exclusive\nsrun -N3 -n3 sh -c '{}'\nsrun -N3 -n3 sh -c '{}'\n",
        phase("s0", "100 + 80 * SLURM_NODEID"),
        phase("s1", "300 - 90 * SLURM_NODEID"),
    ));
    let array = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N1 --exclusive --array=1-2\nS={root}/$(hostname); \
         {rs} set $S package0=$((150 * SLURM_ARRAY_TASK_ID)) package1=10; sleep 4; {rs} set $S all=0\n"
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    cluster.wait_job(array, Duration::from_secs(120));

    let senergy = senergy();
    let id = job.to_string();
    let out = cluster.client(
        None,
        &senergy,
        &[
            "job",
            &id,
            "--json",
            "--carbon-intensity",
            "300",
            "--price",
            "0.2",
            "--currency",
            "EUR",
        ],
    );
    let doc = json(&out);
    let report = &doc["jobs"][0];
    println!(
        "{}",
        serde_json::to_string_pretty(report).unwrap_or_default()
    );
    let sacct = cluster.energy(job);
    let total = u64_of(&report["energy_j"]);
    assert_eq!(total as f64, energy_of(&sacct, &id), "job total is sacct's");
    assert_eq!(report["data"], "complete");
    assert_eq!(report["running"], false);
    let kwh = total as f64 / 3.6e6;
    assert_formula("kwh", f64_of(&report["kwh"]), kwh);
    assert_formula("emissions_g", f64_of(&report["emissions_g"]), kwh * 300.0);
    assert_formula("cost", f64_of(&report["cost"]), kwh * 0.2);
    assert_eq!(doc["currency"], "EUR");
    // what the figure measured: RAPL, and the node meter's own for a job that had its
    // (exclusive) nodes alone; its steps say the same
    assert_eq!(report["source"], "rapl: CPU packages+DRAM", "{report:#}");
    assert_eq!(
        report["method"], "the node meter's own: the job had its nodes alone",
        "{report:#}"
    );
    for step in report["steps"].as_array().expect("steps") {
        assert_eq!(step["method"], report["method"], "{step:#}");
    }

    for (name, most, least) in [("s0", "n3", "n1"), ("s1", "n1", "n3")] {
        let index = &name[1..];
        let s = step(report, index);
        assert_eq!(
            u64_of(&s["energy_j"]) as f64,
            energy_of(&sacct, &format!("{job}.{index}")),
            "step {index} total is sacct's"
        );
        assert_eq!(s["max_node"]["name"], most, "step {index}: {s}");
        assert_eq!(s["min_node"]["name"], least, "step {index}: {s}");
        assert_eq!(s["data"], "complete");
        let nodes = s["node_energy"].as_array().expect("node_energy");
        assert_eq!(nodes.len(), 3, "every node of a 3-node step: {s}");
        for (k, node) in nodes.iter().enumerate() {
            let sim = cluster.sim(k + 1);
            let truth = mark(sim, &format!("{name}_end")).expect("end mark")
                - mark(sim, &format!("{name}_start")).expect("start mark");
            assert_eq!(node["name"], format!("n{}", k + 1));
            // the step counts from its slurmstepd's first reading, a little before the
            // task's start mark and after its end mark (idle power only)
            assert_close(
                &format!("step {index} node n{}", k + 1),
                f64_of(&node["energy_j"]),
                truth,
                0.03,
            );
        }
    }
    // the plugins' NO_VAL watts fix: the extern step's peak power is a real figure where
    // the release records usage for the extern step (26.05 records none: no figure at all)
    let ext = step(report, "extern");
    if !ext["max_watts"].is_null() {
        let peak = u64_of(&ext["max_watts"]);
        assert!(
            (300..=400).contains(&peak),
            "extern step peak power {peak} W"
        );
    }
    let tres = cluster.run(&[
        "sacct",
        "-n",
        "-P",
        "-j",
        &format!("{job}.extern"),
        "-o",
        "TRESUsageOutMax",
    ]);
    assert!(
        !tres.contains("4294967294"),
        "sacct still shows NO_VAL watts: {tres}"
    );

    // the array job id selects its elements, each with sacct's figure
    let aid = array.to_string();
    let doc = json(&cluster.client(None, &senergy, &["job", &aid, "--json"]));
    let elements = doc["jobs"].as_array().expect("jobs");
    assert_eq!(elements.len(), 2, "{doc}");
    let sacct = cluster.energy(array);
    for task in 1..=2 {
        let name = format!("{array}_{task}");
        let e = elements
            .iter()
            .find(|j| j["id"] == name)
            .unwrap_or_else(|| panic!("no {name} in {doc}"));
        assert_eq!(u64_of(&e["array_task_id"]), task);
        assert_eq!(u64_of(&e["energy_j"]) as f64, energy_of(&sacct, &name));
        assert_eq!(
            (e["emissions_g"].is_null(), e["cost"].is_null()),
            (true, true)
        );
    }

    // CSV: a job row and one per step; the table names the job
    let csv = cluster.client(None, &senergy, &["job", &id, "--csv"]);
    let text = String::from_utf8_lossy(&csv.stdout);
    assert!(text.starts_with("job_id,id,step,"), "{text}");
    assert_eq!(
        text.lines().count(),
        1 + 1 + report["steps"].as_array().map_or(0, Vec::len)
    );
    let table = cluster.client(
        None,
        &senergy,
        &[
            "job",
            &id,
            "--carbon-intensity",
            "300",
            "--price",
            "0.2",
            "--currency",
            "EUR",
        ],
    );
    let table = String::from_utf8_lossy(&table.stdout);
    println!("{table}");
    assert!(table.contains(&format!("Job {job}")), "{table}");

    // bad input: a clear message and its own exit status, never a panic
    let unknown = cluster.client(None, &senergy, &["job", "999999"]);
    assert_eq!(unknown.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("999999"));
    let conf = tmp.path().join("senergy.conf");
    fs::write(&conf, "carbon_intensty = 3\n").expect("conf");
    let bad = cluster.client(
        None,
        &senergy,
        &["job", &id, "--config", conf.to_str().expect("path")],
    );
    assert_eq!(bad.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("carbon_intensty"));
    let csv_path = tmp.path().join("grid.csv");
    fs::write(&csv_path, "hour,g\n2025-01-01T00:00:00Z,lots\n").expect("csv");
    let bad = cluster.client(
        None,
        &senergy,
        &["job", &id, "--carbon-csv", csv_path.to_str().expect("path")],
    );
    assert_eq!(bad.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line 2"));
    for out in [&unknown, &bad] {
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

struct User {
    name: &'static str,
    uid: u32,
    account: &'static str,
}

const USERS: [User; 3] = [
    User {
        name: "senergy_alice",
        uid: 7101,
        account: "acct_a",
    },
    User {
        name: "senergy_bob",
        uid: 7102,
        account: "acct_b",
    },
    User {
        name: "senergy_carol",
        uid: 7103,
        account: "acct_a",
    },
];

/// /etc/passwd and /etc/group with the test users added, for the cluster's namespace.
fn etc_with_users(dir: &std::path::Path) {
    fs::create_dir_all(dir).expect("etc dir");
    let mut passwd = fs::read_to_string("/etc/passwd").expect("passwd");
    let mut group = fs::read_to_string("/etc/group").expect("group");
    for u in &USERS {
        passwd.push_str(&format!("{}:x:{}:{}::/tmp:/bin/sh\n", u.name, u.uid, u.uid));
        group.push_str(&format!("{}:x:{}:\n", u.name, u.uid));
    }
    fs::write(dir.join("passwd"), passwd).expect("passwd copy");
    fs::write(dir.join("group"), group).expect("group copy");
}

/// PrivateData=jobs,usage: a user sees their own jobs and usage, an account coordinator
/// their account's, root all; the period report sums the jobs of two accounts.
#[test]
fn usage_sums_two_accounts_and_private_data_limits_what_users_see() {
    let Some(tmp) = root_test_dir("usage_sums_two_accounts_and_private_data_limits_what_users_see")
    else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_users(&etc);
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER)],
            extra_conf: "PrivateData=jobs,usage\n",
            extra_dbd_conf: "PrivateData=jobs,usage\n",
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=120", "package1=30"]);
    cluster.run(&["sacctmgr", "-i", "add", "account", "acct_a,acct_b"]);
    for u in &USERS {
        cluster.run(&[
            "sacctmgr",
            "-i",
            "add",
            "user",
            u.name,
            &format!("account={}", u.account),
        ]);
    }
    cluster.run(&[
        "sacctmgr",
        "-i",
        "add",
        "coordinator",
        "account=acct_a",
        "names=senergy_carol",
    ]);

    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
        - 5;
    let sbatch = cluster.dir.join("bin/sbatch");
    let submit = |u: &User, secs: u32| -> u32 {
        let out = cluster.client(
            Some((u.uid, u.uid)),
            &sbatch,
            &[
                "--parsable",
                "-o",
                "/dev/null",
                "--chdir",
                "/tmp",
                "-A",
                u.account,
                "--wrap",
                &format!("sleep {secs}"),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "sbatch as {}: {text} {}",
                    u.name,
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    let [alice, bob, carol] = &USERS;
    let jobs = [
        (submit(alice, 3), alice),
        (submit(alice, 2), alice),
        (submit(bob, 3), bob),
    ];
    for (job, _) in &jobs {
        cluster.wait_job(*job, Duration::from_secs(120));
    }
    // a running job: reported so far and marked so; no period counts it before it ends
    let running = cluster.sbatch("#!/bin/sh\nsleep 300\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let live = loop {
        // slurmdbd learns of the job a moment after sbatch returns: unknown (3) until then
        let out = cluster.client(None, &senergy(), &["job", &running.to_string(), "--json"]);
        if out.status.code() != Some(3) || std::time::Instant::now() > deadline {
            let doc = json(&out);
            if doc["jobs"][0]["state"] == "RUNNING" || std::time::Instant::now() > deadline {
                break doc;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let live = &live["jobs"][0];
    assert_eq!(
        (&live["state"], &live["running"]),
        (&"RUNNING".into(), &true.into()),
        "{live}"
    );
    assert!(live["end"].is_null(), "{live}");
    assert_ne!(live["data"], "complete", "{live}");
    let end = (start + 3600).to_string();
    let start = start.to_string();
    let senergy = senergy();
    let usage = |who: Option<&User>| {
        json(&cluster.client(
            who.map(|u| (u.uid, u.uid)),
            &senergy,
            &[
                "usage",
                "--start",
                &start,
                "--end",
                &end,
                "--json",
                "--carbon-intensity",
                "200",
                "--price",
                "0.1",
            ],
        ))
    };
    // root: both accounts, each the sum of sacct's figures for its jobs
    let energy = |job: u32| energy_of(&cluster.energy(job), &job.to_string()) as u64;
    let sum_of = |u: &User| -> u64 {
        jobs.iter()
            .filter(|(_, o)| o.name == u.name)
            .map(|(j, _)| energy(*j))
            .sum()
    };
    let all = usage(None);
    println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
    let rows = all["rows"].as_array().expect("rows");
    let row = |doc: &Value, u: &User| -> Option<u64> {
        doc["rows"]
            .as_array()
            .and_then(|r| {
                r.iter()
                    .find(|r| r["user"] == u.name && r["account"] == u.account)
            })
            .map(|r| u64_of(&r["energy_j"]))
    };
    assert_eq!(rows.len(), 2, "{all}");
    assert_eq!(row(&all, alice), Some(sum_of(alice)));
    assert_eq!(row(&all, bob), Some(sum_of(bob)));
    assert!(
        sum_of(alice) > 0 && sum_of(bob) > 0,
        "the jobs measured energy"
    );
    let total = u64_of(&all["total"]["energy_j"]);
    assert_eq!(total, sum_of(alice) + sum_of(bob));
    assert_eq!(u64_of(&all["total"]["jobs"]), 3);
    let kwh = total as f64 / 3.6e6;
    assert_formula(
        "emissions",
        f64_of(&all["total"]["emissions_g"]),
        kwh * 200.0,
    );
    assert_formula("cost", f64_of(&all["total"]["cost"]), kwh * 0.1);

    // a user: their own usage only; another user's job is not there
    let mine = usage(Some(alice));
    assert_eq!(mine["rows"].as_array().map(Vec::len), Some(1), "{mine}");
    assert_eq!(row(&mine, alice), Some(sum_of(alice)));
    let bob_job = jobs[2].0.to_string();
    let alice_job = jobs[0].0.to_string();
    let as_user = |u: &User, job: &str| {
        cluster.client(Some((u.uid, u.uid)), &senergy, &["job", job, "--json"])
    };
    let denied = as_user(alice, &bob_job);
    assert_eq!(
        denied.status.code(),
        Some(3),
        "alice saw bob's job: {}",
        String::from_utf8_lossy(&denied.stdout)
    );
    assert_eq!(json(&as_user(bob, &bob_job))["jobs"][0]["user"], bob.name);
    // the coordinator of acct_a: alice's job, not bob's
    assert_eq!(
        json(&as_user(carol, &alice_job))["jobs"][0]["user"],
        alice.name
    );
    assert_eq!(as_user(carol, &bob_job).status.code(), Some(3));
    // --accounts and --users narrow root's report
    let narrowed = |flag: &str, value: &str| {
        json(&cluster.client(
            None,
            &senergy,
            &[
                "usage", "--start", &start, "--end", &end, "--json", flag, value,
            ],
        ))
    };
    let only_b = narrowed("--accounts", "acct_b");
    assert_eq!(only_b["rows"].as_array().map(Vec::len), Some(1), "{only_b}");
    assert_eq!(row(&only_b, bob), Some(sum_of(bob)));
    let only_alice = narrowed("--users", alice.name);
    assert_eq!(
        only_alice["rows"].as_array().map(Vec::len),
        Some(1),
        "{only_alice}"
    );
    assert_eq!(row(&only_alice, alice), Some(sum_of(alice)));
    let coordinated = usage(Some(carol));
    assert_eq!(
        row(&coordinated, alice),
        Some(sum_of(alice)),
        "{coordinated}"
    );
    assert_eq!(row(&coordinated, bob), None, "{coordinated}");
}

/// Without a usable Slurm configuration senergy says why once and exits 5 as documented.
/// A slurm.conf libslurm cannot parse: its fatal() would exit 1 after its own line; senergy
/// gives its reason instead. A SLURM_CONF that names no file: at once, where libslurm would
/// wait a minute for it to appear. No cluster needed.
#[test]
fn without_slurm_conf_senergy_says_why_once_and_exits_5() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let unparsable = tmp.path().join("slurm.conf");
    std::fs::write(&unparsable, "NoSuchKey=1\n").expect("slurm.conf");
    let missing = tmp.path().join("missing/slurm.conf");
    for (conf, reason) in [
        (&unparsable, "fatal: "),
        (&missing, "SLURM_CONF names no file"),
    ] {
        let out = std::process::Command::new(senergy())
            .args(["job", "1"])
            .env("SLURM_CONF", conf)
            .output()
            .expect("senergy");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "senergy: Slurm's configuration cannot be loaded ({}): {reason}",
                conf.display()
            )),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// senergy as MailProg: a job's end mail reaches the real mailer (a sink writing to a
/// file) with its original body and the summary after it, whose energy is sacct's
/// ConsumedEnergy and whose Scope 2 follows the site file's factors; its BEGIN mail
/// passes unchanged. The job is an ordinary user's; slurmctld runs MailProg.
#[test]
fn end_of_job_mail_gets_the_summary_and_other_mails_pass_unchanged() {
    let Some(tmp) =
        root_test_dir("end_of_job_mail_gets_the_summary_and_other_mails_pass_unchanged")
    else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_users(&etc);
    let sink_out = tmp.path().join("mails.txt");
    let sink = tmp.path().join("sink-mail");
    fs::write(
        &sink,
        format!(
            "#!/bin/sh\n{{ printf 'ARGS'; printf ' [%s]' \"$@\"; echo; cat; echo '--END--'; }} >> {}\n",
            sink_out.display()
        ),
    )
    .expect("sink");
    let site = tmp.path().join("senergy.conf");
    fs::write(
        &site,
        format!(
            "carbon_intensity = 300\nmarket_intensity = 20\npue = 1.25\nprice_per_kwh = 0.2\n\
             currency = \"EUR\"\nversion = \"mail-test\"\nmailer = \"{}\"\n",
            sink.display()
        ),
    )
    .expect("site file");
    // slurmctld gives MailProg only the job's variables: the site's paths come from here
    let mailprog = tmp.path().join("mailprog");
    fs::write(
        &mailprog,
        format!(
            "#!/bin/sh\nexport SLURM_CONF={} SENERGY_CONF={}\nexec {} \"$@\"\n",
            tmp.path().join("cluster/etc/slurm.conf").display(),
            site.display(),
            senergy().display()
        ),
    )
    .expect("mailprog");
    for script in [&sink, &mailprog] {
        let mut perms = fs::metadata(script).expect("script").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(script, perms).expect("chmod");
    }
    let extra = format!("MailProg={}\n", mailprog.display());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER)],
            extra_conf: &extra,
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=150", "package1=30"]);
    let alice = &USERS[0];
    cluster.run(&["sacctmgr", "-i", "add", "account", alice.account]);
    cluster.run(&[
        "sacctmgr",
        "-i",
        "add",
        "user",
        alice.name,
        &format!("account={}", alice.account),
    ]);
    let out = cluster.client(
        Some((alice.uid, alice.uid)),
        &cluster.dir.join("bin/sbatch"),
        &[
            "--parsable",
            "-o",
            "/dev/null",
            "--chdir",
            "/tmp",
            "-A",
            alice.account,
            "-J",
            "mailed",
            "--mail-type=BEGIN,END",
            "--mail-user=alice@example.org",
            "--wrap",
            "sleep 4",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let job: u32 = text
        .trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("sbatch: {text} {}", String::from_utf8_lossy(&out.stderr)));
    cluster.wait_job(job, Duration::from_secs(120));
    // slurmctld sends the END mail at the job's end; the summary waits for slurmdbd
    let deadline = std::time::Instant::now() + Duration::from_secs(110);
    let mails = loop {
        let text = fs::read_to_string(&sink_out).unwrap_or_default();
        if text.matches("--END--").count() >= 2 || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("{mails}");
    let mails: Vec<&str> = mails.split("--END--\n").filter(|m| !m.is_empty()).collect();
    assert_eq!(mails.len(), 2, "a BEGIN and an END mail: {mails:?}");
    let (begin, end) = (mails[0], mails[1]);
    // BEGIN: the arguments and the (empty) body as slurmctld gave them
    assert!(
        begin.starts_with(&format!("ARGS [-s] [Slurm Job_id={job} Name=mailed Began")),
        "{begin}"
    );
    assert!(begin.ends_with("] [alice@example.org]\n"), "{begin}");
    assert_eq!(
        begin.lines().count(),
        1,
        "the body passes unchanged (empty): {begin}"
    );
    // END: the same arguments, the summary after the (empty) body
    assert!(
        end.starts_with(&format!("ARGS [-s] [Slurm Job_id={job} Name=mailed Ended")),
        "{end}"
    );
    assert!(
        end.contains("] [alice@example.org]\nEnergy and emissions (senergy):\n"),
        "{end}"
    );
    assert!(
        end.contains(&format!("\nJob {job} (mailed) COMPLETED")),
        "{end}"
    );
    let sacct = energy_of(&cluster.energy(job), &job.to_string());
    assert!(sacct > 0.0, "the job measured energy");
    let energy_line = end
        .lines()
        .find(|l| l.starts_with("  energy: "))
        .unwrap_or_else(|| panic!("no energy line: {end}"));
    assert!(
        energy_line.ends_with(&format!(" kWh ({sacct:.0} J)")),
        "summary {energy_line} != sacct {sacct} J"
    );
    let grams = |label: &str| -> f64 {
        end.lines()
            .find_map(|l| l.strip_prefix(&format!("  {label}: ")))
            .and_then(|v| v.strip_suffix(" gCO2e"))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {label}: {end}"))
    };
    let facility_kwh = sacct / 3.6e6 * 1.25;
    // two decimals in the mail: within half a hundredth of a gram
    assert!((grams("scope 2, location-based") - facility_kwh * 300.0).abs() <= 0.005);
    assert!((grams("scope 2, market-based") - facility_kwh * 20.0).abs() <= 0.005);
    assert!(
        end.contains("factors: site file ") && end.contains("version mail-test"),
        "{end}"
    );

    // the same factors in every report (issue 44, item 1): each scope per job and step
    // (JSON, CSV, table) and per user and account (usage), each stamped with the site file
    let site_arg = site.to_str().expect("path");
    let id = job.to_string();
    let report = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", site_arg]);
        cluster.client(None, &senergy(), &all)
    };
    let near = |what: &str, got: &Value, want: f64| {
        let got = f64_of(got);
        assert!((got - want).abs() <= want * 1e-3, "{what}: {got} != {want}");
    };
    let stamped = |factors: &Value| {
        assert_eq!(factors["site_file"], site_arg, "{factors}");
        assert_eq!(factors["version"], "mail-test", "{factors}");
        assert_eq!(factors["location_g_per_kwh"]["value_from"], "site file");
        assert_eq!(factors["market_g_per_kwh"]["value"], 20.0);
        assert_eq!(factors["pue"]["value"], 1.25);
    };
    let doc = json(&report(&["job", &id, "--json"]));
    stamped(&doc["factors"]);
    let j = &doc["jobs"][0];
    let facility = |joules: f64| joules / 3.6e6 * 1.25;
    near(
        "job facility",
        &j["emissions"]["facility_energy_j"],
        sacct * 1.25,
    );
    near(
        "job location",
        &j["emissions"]["scope2_location_g"],
        facility(sacct) * 300.0,
    );
    near(
        "job market",
        &j["emissions"]["scope2_market_g"],
        facility(sacct) * 20.0,
    );
    for s in j["steps"].as_array().expect("steps") {
        let Some(e) = s["energy_j"].as_u64().filter(|e| *e > 0) else {
            continue;
        };
        let e = e as f64;
        near(
            "step location",
            &s["emissions"]["scope2_location_g"],
            facility(e) * 300.0,
        );
        near(
            "step market",
            &s["emissions"]["scope2_market_g"],
            facility(e) * 20.0,
        );
    }
    let csv = report(&["job", &id, "--csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout);
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    for column in [
        "scope2_location_g",
        "scope2_market_g",
        "facility_energy_j",
        "factors",
    ] {
        assert!(header.contains(&column), "{column}: {csv}");
    }
    assert!(
        csv.lines().skip(1).all(|l| l.contains("version mail-test")),
        "{csv}"
    );
    let table = report(&["job", &id]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("by scope: facility "), "{table}");
    assert!(table.contains("factors: site file "), "{table}");
    let window = ["--start", "2000-01-01", "--end", "2100-01-01"];
    let usage = json(&report(&[&["usage", "--json"][..], &window[..]].concat()));
    stamped(&usage["factors"]);
    let row = usage["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["user"] == alice.name))
        .unwrap_or_else(|| panic!("no row of {}: {usage}", alice.name));
    assert_eq!(row["account"], alice.account);
    near(
        "usage location",
        &row["emissions"]["scope2_location_g"],
        facility(sacct) * 300.0,
    );
    near(
        "usage market",
        &row["emissions"]["scope2_market_g"],
        facility(sacct) * 20.0,
    );
    let csv = report(&[&["usage", "--csv"][..], &window[..]].concat());
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(
        csv.lines().next().unwrap_or("").contains("scope2_market_g"),
        "{csv}"
    );
    assert!(
        csv.lines().skip(1).all(|l| l.contains("version mail-test")),
        "{csv}"
    );
    let table = report(&[&["usage"][..], &window[..]].concat());
    assert!(String::from_utf8_lossy(&table.stdout).contains("factors: site file "));
}

/// How many jobs the flood of [`mails_of_jobs_that_never_ran_hold_no_ones_mail`] cancels:
/// with the summary's 60 s wait each, slurmctld's 64 mail threads (agent.c
/// `MAX_MAIL_THREADS`, 22.05) take 300 / 64 = 4 rounds of a minute before a mail queued
/// after them goes out.
const FLOOD_JOBS: usize = 300;
/// The most another user's BEGIN mail may wait behind the flood under senergy: 60 s was a
/// single summary's wait before; the flood's mails now cost the mailer's pace.
const FLOOD_BEGIN_BOUND: Duration = Duration::from_secs(30);

/// What one flood cost ([`flood`]).
#[derive(Debug)]
struct Flood {
    /// From the other user's submission to their BEGIN mail at the mailer.
    begin_delay: Option<Duration>,
    /// From the cancel to the last END mail at the mailer.
    drained: Option<Duration>,
    /// The most agent threads sdiag showed (each mail in flight is one).
    peak_agent_threads: u32,
    /// The END mails as the mailer got them.
    ends: Vec<String>,
}

/// A stand-in for /usr/bin/mail that keeps each mail in a file of its own in `dir`: the
/// time it was handed over, its arguments, its body (written whole, then renamed to
/// `*.mail`, so that a reader never sees half of one).
fn file_sink(path: &std::path::Path, dir: &std::path::Path) {
    fs::write(
        path,
        format!(
            "#!/bin/sh\nt=$(date +%s.%N)\nf=$(mktemp {0}/part.XXXXXXXX) || exit 1\n\
             {{ echo \"$t\"; printf '[%s]' \"$@\"; echo; cat; }} >\"$f\" && mv \"$f\" \"$f.mail\"\n",
            dir.display()
        ),
    )
    .expect("sink");
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("sink mode");
}

/// The mails in `dir`: (the time they reached the mailer, their text).
fn sunk(dir: &std::path::Path) -> Vec<(f64, String)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".mail"))
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .filter_map(|text| {
            let (t, rest) = text.split_once('\n')?;
            Some((t.trim().parse().ok()?, rest.to_string()))
        })
        .collect()
}

fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `jobs` jobs of `flooder` with `--mail-type=END`, held, then cancelled at once while
/// pending; right after, `other` submits a job with `--mail-type=BEGIN`. Watches the mails
/// reach the mailer (in `mails`), and sdiag's agent threads, until `deadline` after the
/// cancel.
fn flood(
    cluster: &Cluster,
    mails: &std::path::Path,
    (flooder, other): (&User, &User),
    jobs: usize,
    deadline: Duration,
) -> Flood {
    let _ = fs::remove_dir_all(mails);
    fs::create_dir_all(mails).expect("mails dir");
    let sbatch = real_client(cluster, "sbatch");
    let submit = format!(
        "for i in $(seq {jobs}); do {} -H -o /dev/null --chdir /tmp -A {} -J flood \
         --mail-type=END --mail-user={}@example.org --wrap true >/dev/null || exit 1; done",
        sbatch.display(),
        flooder.account,
        flooder.name
    );
    let t = std::time::Instant::now();
    let out = cluster.client(
        Some((flooder.uid, flooder.uid)),
        std::path::Path::new("/bin/sh"),
        &["-c", &submit],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{jobs} held jobs submitted in {:.1?}", t.elapsed());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let threads = cluster
                    .try_run(&["sdiag"])
                    .and_then(|text| {
                        text.lines()
                            .find_map(|l| l.strip_prefix("Agent thread count:"))
                            .and_then(|n| n.trim().parse::<u32>().ok())
                    })
                    .unwrap_or(0);
                peak = peak.max(threads);
                std::thread::sleep(Duration::from_millis(250));
            }
            peak
        });
        let cancelled_at = epoch_now();
        let scancel = cluster.client(
            Some((flooder.uid, flooder.uid)),
            &real_client(cluster, "scancel"),
            &["--state=PENDING", "-u", flooder.name],
        );
        assert!(scancel.status.success(), "{scancel:?}");
        let out = cluster.client(
            Some((other.uid, other.uid)),
            &sbatch,
            &[
                "--parsable",
                "-o",
                "/dev/null",
                "--chdir",
                "/tmp",
                "-A",
                other.account,
                "-J",
                "victim",
                "--mail-type=BEGIN",
                &format!("--mail-user={}@example.org", other.name),
                "--wrap",
                "sleep 1",
            ],
        );
        let submitted_at = epoch_now();
        assert!(out.status.success(), "{out:?}");
        let end_at = std::time::Instant::now() + deadline;
        let result = loop {
            let got = sunk(mails);
            let begin = got
                .iter()
                .find(|(_, m)| m.contains(" Began") && m.contains(&format!("[{}@", other.name)))
                .map(|(t, _)| *t);
            let ends: Vec<&(f64, String)> =
                got.iter().filter(|(_, m)| m.contains(" Ended")).collect();
            let all = ends.len() >= jobs;
            if (begin.is_some() && all) || std::time::Instant::now() > end_at {
                let since = |t: f64, from: f64| Duration::from_secs_f64((t - from).max(0.0));
                break Flood {
                    begin_delay: begin.map(|t| since(t, submitted_at)),
                    drained: all.then(|| {
                        since(
                            ends.iter().map(|(t, _)| *t).fold(0.0, f64::max),
                            cancelled_at,
                        )
                    }),
                    peak_agent_threads: 0,
                    ends: ends.iter().map(|(_, m)| m.clone()).collect(),
                };
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Flood {
            peak_agent_threads: sampler.join().expect("sampler"),
            ..result
        }
    })
}

/// A user's jobs cancelled while pending, each with an END mail, hold no one's mail (issue
/// 53, item 4): under MailProg=senergy a user cancels 300 such jobs at once, and another
/// user's BEGIN mail, queued behind their 300 END mails, reaches the mailer within
/// [`FLOOD_BEGIN_BOUND`] of the other's submission, as it does behind a plain mailer (the
/// baseline: MailProg a /usr/bin/mail-like stand-in). Every END mail goes out, with the
/// job's summary or one line saying why there is none. Before, each END mail's summary
/// waited 60 s for an energy that never comes, holding one of slurmctld's 64 mail threads.
#[test]
fn mails_of_jobs_that_never_ran_hold_no_ones_mail() {
    let Some(tmp) = root_test_dir("mails_of_jobs_that_never_ran_hold_no_ones_mail") else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_users(&etc);
    let mails = tmp.path().join("mails");
    let sink = tmp.path().join("sink-mail");
    file_sink(&sink, &mails);
    let site = tmp.path().join("senergy.conf");
    fs::write(&site, format!("mailer = \"{}\"\n", sink.display())).expect("site file");
    // the baseline's MailProg is the stand-in itself; then senergy's
    let baseline = tmp.path().join("baseline");
    let mailprog = tmp.path().join("mailprog");
    fs::write(
        &mailprog,
        format!(
            "#!/bin/sh\nexport SLURM_CONF={} SENERGY_CONF={}\n[ -e {} ] && exec {} \"$@\"\n\
             exec {} \"$@\"\n",
            tmp.path().join("cluster/etc/slurm.conf").display(),
            site.display(),
            baseline.display(),
            sink.display(),
            senergy().display()
        ),
    )
    .expect("mailprog");
    fs::set_permissions(
        &mailprog,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("mailprog mode");
    let extra = format!("MailProg={}\n", mailprog.display());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER)],
            extra_conf: &extra,
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    let (alice, bob) = (&USERS[0], &USERS[1]);
    for u in [alice, bob] {
        cluster.run(&["sacctmgr", "-i", "add", "account", u.account]);
        cluster.run(&[
            "sacctmgr",
            "-i",
            "add",
            "user",
            u.name,
            &format!("account={}", u.account),
        ]);
    }
    let t = std::time::Instant::now();
    fs::write(&baseline, "").expect("baseline mode");
    let plain = flood(
        &cluster,
        &mails,
        (bob, alice),
        FLOOD_JOBS,
        Duration::from_secs(60),
    );
    println!(
        "baseline (MailProg the stand-in): {plain:?}",
        plain = (plain.begin_delay, plain.drained, plain.peak_agent_threads)
    );
    fs::remove_file(&baseline).expect("senergy mode");
    let ours = flood(
        &cluster,
        &mails,
        (bob, alice),
        FLOOD_JOBS,
        FLOOD_BEGIN_BOUND + Duration::from_secs(30),
    );
    println!(
        "MailProg=senergy: BEGIN delay {:?}, END mails drained in {:?}, peak agent threads {}; \
         test {:.0?}",
        ours.begin_delay,
        ours.drained,
        ours.peak_agent_threads,
        t.elapsed()
    );
    let plain_delay = plain.begin_delay.expect("the baseline's BEGIN mail");
    let delay = ours.begin_delay.unwrap_or_else(|| {
        panic!(
            "no BEGIN mail within {:?}",
            FLOOD_BEGIN_BOUND + Duration::from_secs(30)
        )
    });
    assert!(
        delay <= FLOOD_BEGIN_BOUND,
        "alice's BEGIN mail waited {delay:?} behind bob's cancelled jobs (baseline {plain_delay:?})"
    );
    assert_eq!(ours.ends.len(), FLOOD_JOBS, "every END mail goes out");
    let (mut summarised, mut told) = (0, 0);
    for mail in &ours.ends {
        if mail.contains("Energy and emissions (senergy):") {
            assert!(mail.contains(" CANCELLED, 0 nodes"), "{mail}");
            // no node measured it: no figure (22.05.8), or the 0 J a release may record
            assert!(
                mail.contains("  energy: not recorded") || mail.contains(" kWh (0 J)"),
                "{mail}"
            );
            summarised += 1;
        } else {
            assert!(
                mail.contains("senergy: no energy summary: accounting does not hold job ")
                    && mail.contains("summary slots"),
                "{mail}"
            );
            told += 1;
        }
    }
    println!("{summarised} END mails with the summary, {told} saying why not");

    // the slots in StateSaveLocation, as libslurm names it: with both of 2 held (another
    // process's flock, which waits for each: the check below takes one a moment), a summary that would wait (a running job's) ends at once and says
    // why; with one free, it waits
    let running = cluster.sbatch("#!/bin/sh\nsleep 60\n");
    let slots = cluster.dir.join("state/senergy-mail-slots");
    fs::create_dir_all(&slots).expect("slots dir");
    fs::set_permissions(&slots, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("slots mode");
    let hold = |script: &str| {
        std::process::Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(&slots)
            .spawn()
            .expect("sh and util-linux flock")
    };
    let mut holder =
        hold("cd \"$1\" && exec 8>>slot.0 9>>slot.1 && flock 8 && flock 9 && exec sleep 60");
    let summary = |wait: &str| {
        let t = std::time::Instant::now();
        let id = running.to_string();
        let out = cluster.client(
            None,
            &senergy(),
            &["job", &id, "--summary", "--wait", wait, "--mail-slots", "2"],
        );
        (out, t.elapsed())
    };
    let held = || {
        !std::process::Command::new("flock")
            .args(["-n"])
            .arg(slots.join("slot.1"))
            .arg("true")
            .status()
            .expect("util-linux flock")
            .success()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !held() {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never held"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (busy, took) = summary("20");
    let said = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(5), "{said}");
    assert!(
        said.contains(&format!(
            "accounting does not hold job {running}'s final figures yet, and all 2 summary \
             slots in {} are held",
            slots.display()
        )),
        "{said}"
    );
    assert!(
        took < Duration::from_secs(10),
        "no wait for a slot: {took:?}"
    );
    println!("both slots held: exit 5 after {took:.1?}: {}", said.trim());
    holder.kill().expect("kill");
    holder.wait().expect("reaped");
    let (waited, took) = summary("3");
    assert!(waited.status.success(), "{waited:?}");
    assert!(
        took >= Duration::from_secs(3),
        "a slot free: it waited ({took:?})"
    );
    println!("a slot free: waited, answered after {took:.1?}");
    cluster.run(&["scancel", &running.to_string()]);
}

/// The Slurm client `name` itself, for [`Cluster::client`] (which runs in the cluster's
/// network namespace already): its `DIR/bin` wrapper enters that namespace, which a user
/// may not.
fn real_client(cluster: &Cluster, name: &str) -> std::path::PathBuf {
    let wrapper = fs::read_to_string(cluster.dir.join("bin").join(name)).expect("wrapper");
    let exec = wrapper
        .lines()
        .find_map(|l| l.strip_prefix("exec "))
        .and_then(|l| l.strip_suffix(" \"$@\""))
        .expect("the wrapper's exec line");
    let program = exec.rsplit(" -- ").next().unwrap_or(exec);
    program.trim_matches('\'').into()
}

/// The job's `field` (AdminComment, SystemComment, State) as accounting holds it (what `sacct
/// -X -o FIELD` shows).
fn sacct_field(cluster: &Cluster, job: u32, field: &str) -> String {
    cluster
        .run(&[
            "sacct",
            "-n",
            "-P",
            "-X",
            "-j",
            &job.to_string(),
            "-o",
            field,
        ])
        .trim()
        .to_string()
}

fn admin_comment(cluster: &Cluster, job: u32) -> String {
    sacct_field(cluster, job, "AdminComment")
}

/// Where `senergy record` keeps the job's figures.
fn system_comment(cluster: &Cluster, job: u32) -> String {
    sacct_field(cluster, job, "SystemComment")
}

/// `senergy record` as the nodes' Epilog: each node's figure of an ordinary user's 2-node
/// job is kept in the job's SystemComment, equal to its ledger's; `senergy job` shows it
/// to the owner; the owner cannot write SystemComment; and where
/// Slurm lets the owner rewrite their job's energy (25.11+), senergy says the figure was
/// changed after the job.
#[test]
fn the_epilog_keeps_each_nodes_figure_with_the_job_and_an_owners_edit_is_told() {
    let test = "the_epilog_keeps_each_nodes_figure_with_the_job_and_an_owners_edit_is_told";
    let Some(tmp) = root_test_dir(test) else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_users(&etc);
    let epilog = shipped_epilog(tmp.path());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 2,
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER); 2],
            extra_conf: &format!("Epilog={}\n", epilog.display()),
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=120", "package1=30"]);
    cluster.sim(2).set(&["package0=60", "package1=20"]);
    let alice = &USERS[0];
    cluster.run(&["sacctmgr", "-i", "add", "account", alice.account]);
    cluster.run(&[
        "sacctmgr",
        "-i",
        "add",
        "user",
        alice.name,
        &format!("account={}", alice.account),
    ]);
    // the release's own srun in the job (the job's PATH is the caller's, where another
    // release's srun may come first)
    let srun = format!("{} -N2 sleep 4", real_client(&cluster, "srun").display());
    let out = cluster.client(
        Some((alice.uid, alice.uid)),
        &real_client(&cluster, "sbatch"),
        &[
            "--parsable",
            "-N2",
            "-o",
            "/dev/null",
            "--chdir",
            "/tmp",
            "--wrap",
            &srun,
        ],
    );
    let job: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch: {}", String::from_utf8_lossy(&out.stderr)));
    cluster.wait_job(job, Duration::from_secs(120));
    // the Epilogs write within their bound (10 s for the ledger, 15 s for slurmdbd)
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let comment = loop {
        let comment = system_comment(&cluster, job);
        let both = comment.contains("\"n1\"") && comment.contains("\"n2\"");
        if both || std::time::Instant::now() > deadline {
            break comment;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("SystemComment: {comment}");
    let record: Value = serde_json::from_str(
        comment
            .strip_prefix("senergy=")
            .unwrap_or_else(|| panic!("no record: {comment}\n{}", cluster.logs())),
    )
    .expect("the record is JSON");
    assert_eq!(record["v"], 1);
    // each node's figure is its ledger's figure of the job, to the millijoule
    let mut sum = 0.0;
    for node in ["n1", "n2"] {
        let text = fs::read(
            cluster
                .dir
                .join(format!("spool/{node}/energy-ledger.0.json")),
        )
        .expect("the node's ledger");
        let ledger = slurm_energy_logic::Ledger::parse(&text).expect("a ledger the plugin wrote");
        let truth = ledger.job(job).expect("the ledger keeps the job").joules;
        let kept = f64_of(&record["nodes"][node]["joules"]);
        assert!(
            (kept - truth).abs() <= 0.0005 && truth > 0.0,
            "{node}: kept {kept} J, ledger {truth} J"
        );
        // the plugin that measured it, as its ledger says, and not the meter's description
        assert_eq!(record["nodes"][node]["source"], "rust_rapl", "{record:#}");
        assert!(
            ledger.source().starts_with("rust_rapl: "),
            "{}",
            ledger.source()
        );
        sum += kept;
    }
    // the owner sees it, and accounting's figure agrees with it
    let senergy = senergy();
    let shown = json(&cluster.client(
        Some((alice.uid, alice.uid)),
        &senergy,
        &["job", &job.to_string(), "--json"],
    ));
    let kept = &shown["jobs"][0]["kept"];
    assert_eq!(kept["recorded"], true, "{kept:#}");
    assert_eq!(u64_of(&kept["nodes_recorded"]), 2);
    assert!((f64_of(&kept["joules"]) - sum).abs() < 1e-6, "{kept:#}");
    assert!(kept["tampered"].is_null(), "{shown:#}");

    // `senergy` alone lists the caller's jobs of today, as sacct: alice's job, with the
    // energy sacct gives it and its record; root's list (its own jobs) does not have it;
    // `-M` names the clusters read
    let listed = |user: Option<(u32, u32)>, args: &[&str]| {
        let mut all = vec!["--csv", "--format", "id,user,energy_j,kept"];
        all.extend(args);
        let out = cluster.client(user, &senergy, &all);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let energy = sacct_field(&cluster, job, "ConsumedEnergyRaw");
    let line = format!("{job},{},{energy},recorded", alice.name);
    let alices = listed(Some((alice.uid, alice.uid)), &[]);
    assert_eq!(
        alices.lines().collect::<Vec<_>>(),
        ["id,user,energy_j,kept", &line],
        "{alices}"
    );
    assert!(!listed(None, &[]).contains(&line));
    assert!(listed(None, &["-a"]).contains(&line));
    assert!(listed(Some((alice.uid, alice.uid)), &["-M", "all"]).contains(&line));
    let elsewhere = listed(Some((alice.uid, alice.uid)), &["-M", "another"]);
    assert_eq!(elsewhere.trim(), "id,user,energy_j,kept");

    // the owner cannot write SystemComment: slurmdbd refuses, the record stays
    let sacctmgr = real_client(&cluster, "sacctmgr");
    let id = format!("jobid={job}");
    let refused = cluster.client(
        Some((alice.uid, alice.uid)),
        &sacctmgr,
        &[
            "-i",
            "modify",
            "job",
            "where",
            &id,
            "set",
            "SystemComment=forged",
        ],
    );
    assert!(
        !refused.status.success(),
        "the owner wrote SystemComment: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    assert_eq!(system_comment(&cluster, job), comment);

    // 25.11 lets the owner rewrite their job's energy TRES (sacct's ConsumedEnergy)
    if slurm_sys::SLURM_VERSION_NUMBER >= 0x19_0b_00 {
        let edit = cluster.client(
            Some((alice.uid, alice.uid)),
            &sacctmgr,
            &["-i", "modify", "job", "where", &id, "set", "tres=energy=1"],
        );
        assert!(
            edit.status.success(),
            "{}",
            String::from_utf8_lossy(&edit.stderr)
        );
        let after = json(&cluster.client(
            Some((alice.uid, alice.uid)),
            &senergy,
            &["job", &job.to_string(), "--json"],
        ));
        let tampered = &after["jobs"][0]["kept"]["tampered"];
        assert_eq!(u64_of(&tampered["accounting_j"]), 1, "{after:#}");
        assert!((f64_of(&tampered["recorded_j"]) - sum).abs() < 1e-6);
        let text = cluster.client(
            Some((alice.uid, alice.uid)),
            &senergy,
            &["job", &job.to_string()],
        );
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("WARNING: accounting's energy (1 J)"),
            "{text}"
        );
    }
}

/// `n`'s figure of `job` in its ledger (the truth the record must hold).
fn ledger_joules(cluster: &Cluster, node: &str, job: u32) -> f64 {
    let text = fs::read(
        cluster
            .dir
            .join(format!("spool/{node}/energy-ledger.0.json")),
    )
    .expect("the node's ledger");
    let ledger = slurm_energy_logic::Ledger::parse(&text).expect("a ledger the plugin wrote");
    ledger.job(job).expect("the ledger keeps the job").joules
}

/// An owner's rewrite of their jobs' energy (25.11+, `sacctmgr modify job ... set
/// tres=energy=1`) bills them nothing less (issue 53, item 3): `senergy usage` bills each
/// job what its nodes kept in its SystemComment and counts it as changed in its row (JSON,
/// CSV, text); a job one of whose nodes kept nothing (its Epilog skipped here, as a failed
/// one would) is billed what the others kept, a lower bound under its energy before the
/// edit. Before, usage summed the owner's 1 J per job. Needs Slurm 25.11 or later: earlier
/// releases refuse an owner's TRES edit, and the test says so and ends.
#[test]
fn an_owners_rewrite_of_their_jobs_energy_is_billed_as_the_nodes_kept() {
    let test = "an_owners_rewrite_of_their_jobs_energy_is_billed_as_the_nodes_kept";
    if slurm_sys::SLURM_VERSION_NUMBER < 0x19_0b_00 {
        println!(
            "{test}: Slurm 25.11 or later lets an owner edit their job's TRES; not this release"
        );
        return;
    }
    let Some(tmp) = root_test_dir(test) else {
        return;
    };
    let etc = tmp.path().join("etc-users");
    etc_with_users(&etc);
    let shipped = shipped_epilog(tmp.path());
    // n3's Epilog keeps nothing, as a failed one would
    let epilog = tmp.path().join("epilog-not-n3.sh");
    fs::write(
        &epilog,
        format!(
            "#!/bin/sh\n[ \"$SLURMD_NODENAME\" = n3 ] && exit 0\nexec {}\n",
            shipped.display()
        ),
    )
    .expect("epilog");
    fs::set_permissions(&epilog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("epilog mode");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 3,
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER); 3],
            extra_conf: &format!("Epilog={}\n", epilog.display()),
            etc_users: Some(&etc),
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=120", "package1=30"]);
    cluster.sim(2).set(&["package0=60", "package1=20"]);
    cluster.sim(3).set(&["package0=90", "package1=10"]);
    let alice = &USERS[0];
    cluster.run(&["sacctmgr", "-i", "add", "account", alice.account]);
    cluster.run(&[
        "sacctmgr",
        "-i",
        "add",
        "user",
        alice.name,
        &format!("account={}", alice.account),
    ]);
    let srun = real_client(&cluster, "srun");
    let submit = |nodes: &str| -> u32 {
        let wrap = format!("{} -N{nodes} sleep 4", srun.display());
        let out = cluster.client(
            Some((alice.uid, alice.uid)),
            &real_client(&cluster, "sbatch"),
            &[
                "--parsable",
                &format!("-N{nodes}"),
                "-o",
                "/dev/null",
                "--chdir",
                "/tmp",
                "--wrap",
                &wrap,
            ],
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("sbatch: {}", String::from_utf8_lossy(&out.stderr)))
    };
    // one after the other: each job has its nodes alone
    let whole = submit("2");
    cluster.wait_job(whole, Duration::from_secs(120));
    let partial = submit("3");
    cluster.wait_job(partial, Duration::from_secs(120));
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let kept: Vec<Value> = [whole, partial]
        .iter()
        .map(|&job| {
            loop {
                let comment = system_comment(&cluster, job);
                let both = comment.contains("\"n1\"") && comment.contains("\"n2\"");
                if both || std::time::Instant::now() > deadline {
                    break serde_json::from_str(comment.strip_prefix("senergy=").unwrap_or_else(
                        || panic!("job {job}: no record: {comment}\n{}", cluster.logs()),
                    ))
                    .expect("the record is JSON");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
        .collect();
    // each record holds n1's and n2's ledger figures, and n3 kept nothing
    let mut kept_j = Vec::new();
    for (job, record) in [whole, partial].iter().zip(&kept) {
        let mut sum = 0.0;
        for node in ["n1", "n2"] {
            let got = f64_of(&record["nodes"][node]["joules"]);
            let truth = ledger_joules(&cluster, node, *job);
            assert!(
                (got - truth).abs() <= 0.0005,
                "{job} {node}: {got} J, ledger {truth} J"
            );
            sum += got;
        }
        assert!(record["nodes"].get("n3").is_none(), "{record}");
        kept_j.push(sum);
    }
    let before = energy_of(&cluster.energy(partial), &partial.to_string());
    let n3_truth = ledger_joules(&cluster, "n3", partial);
    println!("kept {kept_j:?} J; job {partial} had {before} J in accounting, n3 {n3_truth} J");
    assert!(
        n3_truth > 0.0 && before > kept_j[1],
        "n3 measured its share"
    );

    // the owner rewrites both jobs' energy
    let sacctmgr = real_client(&cluster, "sacctmgr");
    for job in [whole, partial] {
        let id = format!("jobid={job}");
        let edit = cluster.client(
            Some((alice.uid, alice.uid)),
            &sacctmgr,
            &["-i", "modify", "job", "where", &id, "set", "tres=energy=1"],
        );
        assert!(
            edit.status.success(),
            "{}",
            String::from_utf8_lossy(&edit.stderr)
        );
        assert_eq!(energy_of(&cluster.energy(job), &job.to_string()), 1.0);
    }
    let senergy = senergy();
    let window = ["--start", "2000-01-01", "--end", "2100-01-01"];
    let usage = |form: &str| {
        cluster.client(
            Some((alice.uid, alice.uid)),
            &senergy,
            &[&["usage", form][..], &window[..]].concat(),
        )
    };
    let doc = json(&usage("--json"));
    let row = doc["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["user"] == alice.name))
        .unwrap_or_else(|| panic!("no row of {}: {doc:#}", alice.name));
    let billed = kept_j[0].round() + kept_j[1].round();
    assert_eq!(u64_of(&row["energy_j"]) as f64, billed, "{row:#}");
    assert_eq!(u64_of(&row["jobs_tampered"]), 2, "{row:#}");
    assert_eq!(u64_of(&row["tampered_accounting_j"]), 2, "{row:#}");
    // the job n3 kept nothing of counts as incomplete: its figure is a lower bound
    assert_eq!(u64_of(&row["jobs_incomplete"]), 1, "{row:#}");
    let csv = usage("--csv");
    let csv = String::from_utf8_lossy(&csv.stdout);
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no {name}: {csv}"))
    };
    let line: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(alice.name))
        .unwrap_or_else(|| panic!("no line of {}: {csv}", alice.name))
        .split(',')
        .collect();
    assert_eq!(line[column("jobs_tampered")], "2", "{csv}");
    assert_eq!(line[column("energy_j")], format!("{billed}"), "{csv}");
    let table = cluster.client(
        Some((alice.uid, alice.uid)),
        &senergy,
        &[&["usage"][..], &window[..]].concat(),
    );
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("WARNING: accounting's energy of 2 job(s) was changed after they ended"),
        "{table}"
    );
    // the job itself: billed what n1 and n2 kept, said to be a lower bound
    let shown = json(&cluster.client(
        Some((alice.uid, alice.uid)),
        &senergy,
        &["job", &partial.to_string(), "--json"],
    ));
    let j = &shown["jobs"][0];
    assert_eq!(u64_of(&j["energy_j"]) as f64, kept_j[1].round(), "{j:#}");
    assert_eq!(j["kept"]["tampered"]["lower_bound"], true, "{j:#}");
    assert_eq!(u64_of(&j["kept"]["tampered"]["accounting_j"]), 1);
}

/// Python's own base64, gzip and json, as Princeton's jobstats uses them: `make JSON`
/// prints the AdminComment its slurmctld epilog writes for a job's summary JSON (`JS1:`
/// and the base64 of its gzip, `jobstats -f -b`); `read COMMENT` prints what its `jobstats`
/// reads from an AdminComment (one that starts with `JS1:`, all that follows decoded).
const JOBSTATS_PY: &str = r#"
import base64, gzip, json, sys
if sys.argv[1] == "make":
    print("JS1:" + base64.b64encode(gzip.compress(sys.argv[2].encode("ascii"))).decode("ascii"))
else:
    data = sys.argv[2]
    assert data.startswith("JS1:") and len(data) > 10, "not a JS1 record: " + data
    print(json.dumps(json.loads(gzip.decompress(base64.b64decode(data[4:])))))
"#;

fn jobstats_py(args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", JOBSTATS_PY])
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "jobstats' decoding failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A job summary as jobstats makes it (compact JSON), and its `JS1:` AdminComment: one
/// whose base64 ends without `=` (a third of its records do), which jobstats' lenient
/// base64 decoder reads on past into any text after it, so that text breaks the gunzip.
fn jobstats_record(job: u32) -> (Value, String) {
    (100..200)
        .map(|total_time| {
            let summary = format!(
                r#"{{"nodes":{{"n1":{{"cpus":1,"total_memory":4294967296,"total_time":{total_time},"used_memory":1073741824}}}},"total_time":{job},"gpus":false}}"#
            );
            let comment = jobstats_py(&["make", &summary]);
            (summary, comment)
        })
        .find(|(_, comment)| !comment.ends_with('='))
        .map(|(summary, comment)| (serde_json::from_str(&summary).expect("JSON"), comment))
        .expect("an unpadded record")
}

/// What jobstats' `jobstats` reads from the job's AdminComment.
fn jobstats_reads(cluster: &Cluster, job: u32) -> Value {
    let read = jobstats_py(&["read", &admin_comment(cluster, job)]);
    serde_json::from_str(&read).expect("JSON")
}

/// Sets the job's whole AdminComment to `value` as jobstats' slurmctld epilog does
/// (`sacctmgr -i update job where jobid=J set AdminComment=...`). 22.05's sacctmgr
/// lowercases the value (`strip_quotes(..., make_lower)`; 23.02 keeps it), which breaks
/// jobstats' own base64 there: that is asserted, then the value is stored as 23.02's
/// sacctmgr stores it, in slurmdbd's job table.
fn set_admin_comment(cluster: &Cluster, job: u32, value: &str) {
    cluster.run(&[
        "sacctmgr",
        "-i",
        "update",
        "job",
        "where",
        &format!("jobid={job}"),
        "set",
        &format!("AdminComment={value}"),
    ]);
    if slurm_sys::SLURM_VERSION_NUMBER >= 0x17_02_00 {
        assert_eq!(admin_comment(cluster, job), value);
        return;
    }
    assert_eq!(
        admin_comment(cluster, job),
        value.to_lowercase(),
        "22.05's sacctmgr lowercases AdminComment"
    );
    let setting = |file: &str, key: &str| {
        let text = fs::read_to_string(cluster.dir.join("etc").join(file)).expect("config");
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {file}"))
            .trim()
            .to_string()
    };
    let port = setting("slurmdbd.conf", "StoragePort=");
    let name = setting("slurm.conf", "ClusterName=");
    let sql = format!("UPDATE `{name}_job_table` SET admin_comment='{value}' WHERE id_job={job}");
    let out = cluster.client(
        None,
        std::path::Path::new("/usr/bin/mysql"),
        &[
            "-h",
            "127.0.0.1",
            "-P",
            &port,
            "-u",
            "root",
            "slurm_acct_db",
            "-e",
            &sql,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(admin_comment(cluster, job), value);
}

/// Submits a job that runs until the test lets it end, and waits until accounting holds it
/// running: what is written then is in its row before the node's Epilog runs.
fn held_job(cluster: &Cluster, go: &std::path::Path) -> u32 {
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.2; done\n",
        go.display()
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sacct_field(cluster, job, "State") != "RUNNING" {
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} not running in accounting\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    job
}

/// Lets the job end, and waits for the Epilog's record (within its 25 s bound): the
/// SystemComment, once it holds one.
fn ended_with_record(cluster: &Cluster, job: u32, go: &std::path::Path) -> String {
    fs::write(go, "").expect("go");
    cluster.wait_job(job, Duration::from_secs(60));
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let kept = system_comment(cluster, job);
        if kept.contains("senergy=") {
            return kept;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job}: no record in SystemComment ({kept:?}); AdminComment {:?}\n{}",
            admin_comment(cluster, job),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The node's ledger figure of the job, and that the record `senergy job` reads holds it:
/// in the SystemComment, and as `senergy job` shows it.
fn assert_record_is_the_ledgers(cluster: &Cluster, job: u32) {
    let text = fs::read(cluster.dir.join("spool/n1/energy-ledger.0.json")).expect("ledger");
    let ledger = slurm_energy_logic::Ledger::parse(&text).expect("a ledger the plugin wrote");
    let truth = ledger.job(job).expect("the ledger keeps the job").joules;
    let kept = system_comment(cluster, job);
    let record: Value = serde_json::from_str(
        kept.strip_prefix("senergy=")
            .unwrap_or_else(|| panic!("SystemComment is not our record alone: {kept}")),
    )
    .expect("the record is JSON");
    let recorded = f64_of(&record["nodes"]["n1"]["joules"]);
    assert!(
        (recorded - truth).abs() <= 0.0005 && truth > 0.0,
        "kept {recorded} J, ledger {truth} J"
    );
    let shown = json(&cluster.client(None, &senergy(), &["job", &job.to_string(), "--json"]));
    let shown = &shown["jobs"][0]["kept"];
    assert_eq!(shown["recorded"], true, "{shown:#}");
    assert!(
        (f64_of(&shown["joules"]) - recorded).abs() < 1e-9,
        "{shown:#}"
    );
}

/// Princeton's jobstats beside `senergy record`: jobstats sets the whole AdminComment to
/// `JS1:<base64 of gzipped JSON>` from slurmctld's epilog, before the nodes' Epilogs or
/// after them. In both orders both records survive and each decodes as its own tool reads
/// it (jobstats' with Python's base64/gzip/json as its `jobstats` does; ours with its
/// node's ledger figure), and a site's own AdminComment text is left as it was.
#[test]
fn jobstats_record_and_ours_both_survive_in_either_order() {
    let test = "jobstats_record_and_ours_both_survive_in_either_order";
    let Some(tmp) = root_test_dir(test) else {
        return;
    };
    let epilog = shipped_epilog(tmp.path());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 1,
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            sim_args: vec![Some(INTEL_SERVER)],
            extra_conf: &format!("Epilog={}\n", epilog.display()),
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=120", "package1=30"]);

    // jobstats first (its epilog ended before the node's): its record stays byte for byte
    let go = tmp.path().join("go-before");
    let job = held_job(&cluster, &go);
    let (summary, js1) = jobstats_record(job);
    set_admin_comment(&cluster, job, &js1);
    let kept = ended_with_record(&cluster, job, &go);
    println!("jobstats before: AdminComment {js1}\nSystemComment {kept}");
    assert_eq!(admin_comment(&cluster, job), js1);
    assert_eq!(jobstats_reads(&cluster, job), summary);
    assert_record_is_the_ledgers(&cluster, job);

    // the site's text first, jobstats after the node's Epilog: the site's text is as it
    // was until jobstats sets the whole field, and our record outlives that
    let go = tmp.path().join("go-after");
    let job = held_job(&cluster, &go);
    let site = "reviewed by ops; ticket 42";
    set_admin_comment(&cluster, job, site);
    let kept = ended_with_record(&cluster, job, &go);
    assert_eq!(admin_comment(&cluster, job), site);
    let (summary, js1) = jobstats_record(job);
    set_admin_comment(&cluster, job, &js1);
    println!("jobstats after: AdminComment {js1}\nSystemComment {kept}");
    assert_eq!(jobstats_reads(&cluster, job), summary);
    assert_eq!(system_comment(&cluster, job), kept);
    assert_record_is_the_ledgers(&cluster, job);
}
