//! The soak of BENCHMARKS.md (run with `--ignored`): one node in `EnergyAttribution=shared`
//! mode, with the metrics file on, through thousands of short jobs, several at once, some
//! cancelled and some requeued. At the end, slurmd holds what it held after the first 100
//! jobs (memory, files, threads), the ledger and the metrics file are back to their idle
//! size, every job's figure is within its model's bounds, and the jobs' figures add up to
//! the node's true energy while jobs were on it.
//!
//! `SOAK_JOBS` (default 2000, at least 101) sets how many jobs; `SOAK_JOBS=200` checks the
//! harness in about 17 minutes.

use energy_tests as support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use support::cluster::{Cgroups, Cluster, ClusterSpec};
use support::shared_node::{IDLE_WATTS, RAPL, SIM};
use support::{bin, root_test_dir};

/// The jobs of the first phase, after which slurmd's footprint is the reference.
const FIRST: usize = 100;
/// Jobs submitted per array (one `sbatch`), of which at most [`AT_ONCE`] run.
const ARRAY: usize = 100;
const AT_ONCE: usize = 6;
/// CPUs the node declares (`SlurmdParameters=config_overrides`): the anchor job and the
/// tasks of two arrays overlapping at an array's end find room, one declared CPU each.
const CPUS: u32 = 8;
/// The node's power while jobs are on it (the anchor holds the node), above the idle
/// watts, so each interval has a static and a dynamic part.
const POWER: f64 = 300.0;
/// The node's power while no job is on it at all: nobody's, so in no job's figure.
const IDLE_POWER: f64 = 40.0;
/// A job that left the node is kept this long in the ledger (`KEEP_GONE` in
/// logic/src/ledger.rs), and in the metrics file less.
const KEEP_GONE_SECS: u64 = 300;

/// slurmd's footprint and its files' sizes once no job is on the node.
#[derive(Debug, Clone, Copy)]
struct Idle {
    rss_kib: u64,
    fds: usize,
    threads: usize,
    ledger: u64,
    metrics: u64,
}

fn slurmd_pid(cluster: &Cluster) -> u32 {
    cluster
        .records()
        .pid("slurmd-n1")
        .and_then(|p| u32::try_from(p).ok())
        .expect("slurmd's pid")
}

/// VmRSS (KiB), open files and threads of a process.
fn footprint(pid: u32) -> (u64, usize, usize) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("slurmd's status");
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    let count = |dir: &str| {
        fs::read_dir(format!("/proc/{pid}/{dir}"))
            .expect("slurmd's /proc entry")
            .count()
    };
    (rss, count("fd"), count("task"))
}

fn size(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The job ids the ledger keeps (present or gone less than [`KEEP_GONE_SECS`] ago).
fn ledger_jobs(ledger: &Path) -> Option<Vec<u64>> {
    let text = fs::read_to_string(ledger).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(
        value["jobs"]
            .as_array()?
            .iter()
            .filter_map(|j| j["job"].as_u64())
            .collect(),
    )
}

/// Jobs not yet finished, per `squeue` (pending array tasks one per line).
fn unfinished(cluster: &Cluster) -> Vec<u32> {
    cluster
        .run(&["squeue", "-h", "-r", "-o", "%A"])
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// What the soak measures of each job's run (`sacct -D`: every run of a requeued job).
#[derive(Debug)]
struct Run {
    job: String,
    state: String,
    /// sacct's job line.
    joules: Option<f64>,
    start: f64,
    end: f64,
    /// Its steps' lines, as sacct prints them.
    steps: Vec<String>,
}

impl Run {
    /// When it began: sacct's job line, or where that says `Unknown` (a run requeued as it
    /// started), its first step's start.
    fn began(&self) -> f64 {
        if !self.start.is_nan() {
            return self.start;
        }
        self.steps
            .iter()
            .filter_map(|l| l.split('|').nth(3)?.trim().parse::<f64>().ok())
            .fold(f64::NAN, f64::min)
    }

    /// Its extern step's figure, which the job line shows with `PrologFlags=Contain`.
    fn extern_joules(&self) -> Option<f64> {
        self.steps
            .iter()
            .find(|l| l.starts_with(&format!("{}.extern|", self.job)))
            .and_then(|l| l.split('|').nth(2)?.trim().parse().ok())
    }
}

/// Every run of every job, each job line followed by its own steps' (`sacct -D` prints a
/// requeued job's runs one after the other, each with its steps).
fn runs(cluster: &Cluster) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for line in cluster
        .run(&[
            "env",
            "SLURM_TIME_FORMAT=%s",
            "sacct",
            "-D",
            "-n",
            "-P",
            "-S",
            "2020-01-01",
            "-o",
            "JobIDRaw,State,ConsumedEnergyRaw,Start,End",
        ])
        .lines()
    {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 5 {
            continue;
        }
        if f[0].contains('.') {
            if let Some(run) = runs.last_mut() {
                run.steps.push(line.to_string());
            }
            continue;
        }
        runs.push(Run {
            job: f[0].to_string(),
            state: f[1].to_string(),
            joules: f[2].trim().parse().ok(),
            start: f[3].trim().parse().unwrap_or(f64::NAN),
            end: f[4].trim().parse().unwrap_or(f64::NAN),
            steps: Vec::new(),
        });
    }
    runs
}

/// The array of jobs `base..base + count` (numbered over the whole soak): each sleeps 2 to
/// 4 s, one in four spins a CPU for a second first; job n with n % 20 == 7 cancels itself
/// (by its array id: 22.05's scancel refuses an array task's own job id, "Invalid job id
/// specified") and n % 25 == 3 requeues itself on its first run (the two never meet).
fn array_script(base: usize, count: usize) -> String {
    format!(
        "#!/bin/sh\n#SBATCH -n1 -c1 --requeue --array=0-{}%{AT_ONCE}\n\
         n=$(({base} + SLURM_ARRAY_TASK_ID))\n\
         if [ $((n % 4)) = 0 ]; then timeout 1 sh -c 'while :; do :; done'; fi\n\
         sleep $((2 + n % 3))\n\
         if [ $((n % 20)) = 7 ]; then scancel ${{SLURM_ARRAY_JOB_ID}}_$SLURM_ARRAY_TASK_ID; sleep 60; fi\n\
         if [ $((n % 25)) = 3 ] && [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then \
         scontrol requeue $SLURM_JOB_ID; sleep 60; fi\n",
        count - 1
    )
}

struct Soak<'a> {
    cluster: &'a Cluster,
    ledger: &'a Path,
    metrics: &'a Path,
    pid: u32,
    /// The node's true joules over each phase's powered span.
    powered: f64,
    /// The jobs' true joules while no job was on the node.
    nobodys: f64,
    /// The largest ledger and metrics file seen while jobs ran.
    largest: (u64, u64),
    started: Instant,
}

impl Soak<'_> {
    /// Runs jobs `from..to` while an anchor job holds the node, so that at every instant
    /// of the powered span some job is on it: the jobs' figures add up to all of it.
    fn phase(&mut self, from: usize, to: usize) {
        let sim = self.cluster.sim(1);
        let raplsim = bin("raplsim").display().to_string();
        let d = sim.dir.display().to_string();
        let anchor = self.cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} anchor_{from}\nexec sleep 100000\n"
        ));
        let deadline = Instant::now() + Duration::from_secs(120);
        while support::cluster::mark(sim, &format!("anchor_{from}")).is_none() {
            assert!(Instant::now() < deadline, "the anchor did not start");
            sleep(Duration::from_millis(200));
        }
        // the anchor's extern step is on the node's ledger before its batch script runs
        sleep(Duration::from_secs(2));
        let on = sim.truth();
        sim.set(&[&format!("package0={POWER}")]);
        let mut next = from;
        let mut polls = 0;
        loop {
            // the anchor aside
            let queued = unfinished(self.cluster).len().saturating_sub(1);
            if next == to && queued == 0 {
                break;
            }
            if next < to && queued <= AT_ONCE {
                let count = ARRAY.min(to - next);
                self.cluster.sbatch(&array_script(next, count));
                next += count;
            }
            self.largest.0 = self.largest.0.max(size(self.ledger));
            self.largest.1 = self.largest.1.max(size(self.metrics));
            polls += 1;
            if polls % 15 == 1 {
                let (rss, fds, threads) = footprint(self.pid);
                println!(
                    "{:>5.0} s: {} jobs submitted, {queued} not finished; slurmd {rss} KiB, {fds} fds, \
                 {threads} threads; ledger {} B, metrics {} B",
                    self.started.elapsed().as_secs_f64(),
                    next,
                    size(self.ledger),
                    size(self.metrics)
                );
            }
            sleep(Duration::from_secs(2));
        }
        sim.set(&["package0=0"]);
        self.powered += sim.truth() - on;
        self.cluster.run(&["scancel", &anchor.to_string()]);
    }

    /// Waits until no job is on the node and the ledger keeps none, at [`IDLE_POWER`],
    /// and returns what slurmd then holds; the power is off again when it returns.
    fn idle(&mut self) -> Idle {
        let sim = self.cluster.sim(1);
        let steps_left = || {
            fs::read_dir(self.cluster.dir.join("spool/n1"))
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("n1_"))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !unfinished(self.cluster).is_empty() || steps_left() > 0 {
            assert!(Instant::now() < deadline, "the jobs did not all end");
            sleep(Duration::from_secs(1));
        }
        // let the last step's sample pass before the node draws power nobody holds
        sleep(Duration::from_secs(3));
        let from = sim.truth();
        sim.set(&[&format!("package0={IDLE_POWER}")]);
        let gone = Instant::now();
        let deadline = gone + Duration::from_secs(KEEP_GONE_SECS + 60);
        loop {
            let kept = ledger_jobs(self.ledger).unwrap_or_default();
            let metrics = fs::read_to_string(self.metrics).unwrap_or_default();
            // a series (not its help text) of a job or a step
            let series = metrics
                .lines()
                .filter(|l| !l.starts_with('#') && l.contains("jobid="))
                .count();
            if kept.is_empty() && series == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} s after the last job left, the ledger keeps jobs {kept:?}:\n{}\nmetrics:\n{metrics}",
                gone.elapsed().as_secs(),
                fs::read_to_string(self.ledger).unwrap_or_default()
            );
            sleep(Duration::from_secs(2));
        }
        println!(
            "the ledger kept the gone jobs {:.0} s after the last left",
            gone.elapsed().as_secs_f64()
        );
        // a few more samples, each rewriting both files
        sleep(Duration::from_secs(5));
        let (rss_kib, fds, threads) = footprint(self.pid);
        let idle = Idle {
            rss_kib,
            fds,
            threads,
            ledger: size(self.ledger),
            metrics: size(self.metrics),
        };
        sim.set(&["package0=0"]);
        self.nobodys += sim.truth() - from;
        println!("idle: {idle:?}");
        println!(
            "ledger: {}",
            fs::read_to_string(self.ledger).unwrap_or_default()
        );
        // the next phase's anchor arrives at 0 W
        sleep(Duration::from_secs(3));
        idle
    }
}

#[test]
#[ignore = "benchmark: a soak of thousands of jobs (SOAK_JOBS, default 2000; about 40 minutes)"]
fn soak_of_short_jobs_on_a_shared_node() {
    let Some(tmp) = root_test_dir("soak_of_short_jobs_on_a_shared_node") else {
        return;
    };
    let jobs: usize = std::env::var("SOAK_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    assert!(jobs > FIRST, "SOAK_JOBS={jobs}: more than {FIRST} jobs");
    let metrics_dir = tmp.path().join("metrics");
    fs::create_dir_all(&metrics_dir).expect("metrics dir");
    let metrics = metrics_dir.join("slurm_energy.prom");
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution=shared\n\
                 EnergyAttributionIdleWatts={IDLE_WATTS}\nEnergyMetricsFile={}\n",
                metrics.display()
            ),
            sim_args: vec![Some(SIM)],
            cpus: Some(CPUS),
            cgroups: Cgroups::V1,
            // a requeued job runs again 11 s after it left, not 121 s
            cred_expire: Some(10),
            ..ClusterSpec::default()
        },
    );
    let ledger = cluster.ledger_path(1);
    let mut soak = Soak {
        cluster: &cluster,
        ledger: &ledger,
        metrics: &metrics,
        pid: slurmd_pid(&cluster),
        powered: 0.0,
        nobodys: 0.0,
        largest: (0, 0),
        started: Instant::now(),
    };
    let before = footprint(soak.pid);
    println!("slurmd before any job: {before:?} (VmRSS KiB, fds, threads)");
    soak.phase(0, FIRST);
    let after_first = soak.idle();
    // the ledger at its steadiest size (the jobs of KEEP_GONE) is reached in this phase
    // and not in the first: the allocator keeps what it needed, so memory is compared
    // between the middle and the end
    let half = jobs / 2;
    soak.phase(FIRST, half);
    let middle = soak.idle();
    soak.phase(half, jobs);
    let at_end = soak.idle();
    let wall = soak.started.elapsed();
    assert_eq!(slurmd_pid(&cluster), soak.pid, "slurmd ran throughout");

    // every run of every job, the three anchors' among them
    let runs = runs(&cluster);
    let anchors = 3;
    let count = |f: &dyn Fn(usize) -> bool| (0..jobs).filter(|&n| f(n)).count();
    let cancelled = count(&|n| n % 20 == 7);
    let requeued = count(&|n| n % 25 == 3);
    let by_state = |prefix: &str| runs.iter().filter(|r| r.state.starts_with(prefix)).count();
    println!(
        "runs: {} ({} jobs, {anchors} anchors), completed {}, cancelled {}, requeued {} (of {requeued} asked)",
        runs.len(),
        jobs,
        by_state("COMPLETED"),
        by_state("CANCELLED"),
        by_state("REQUEUED")
    );

    // each run's bounds: at most the node's whole power while it was there (sacct's
    // seconds, widened by a second at each end and one sample); at least its static share
    // with every CPU of the node held, over the part of its run surely there. A job's
    // cpuset has 1 or 2 of the machine's 2 CPUs (the node declares more), so with the
    // node full its share of what jobs hold is at least 1 / (1 + 2 (CPUS - 1)).
    // A run's figure is its job line's; where sacct shows none there, its extern step's
    // (the job line is that step with Contain), and those runs are counted apart.
    let mut sum = 0.0;
    let mut outside = Vec::new();
    let mut no_job_line = Vec::new();
    let mut per_state: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for r in &runs {
        let joules = match (r.joules, r.extern_joules()) {
            (Some(j), _) => j,
            (None, Some(j)) => {
                no_job_line.push(r);
                j
            }
            (None, None) => {
                outside.push(format!("{r:?}: no figure"));
                continue;
            }
        };
        sum += joules;
        let secs = r.end - r.began();
        let high = POWER * (secs + 3.0);
        let low = IDLE_WATTS / (2 * CPUS - 1) as f64 * (secs - 3.0).max(0.0);
        if !(low..=high + 1.0).contains(&joules) {
            outside.push(format!(
                "{r:?}: {joules} J outside {low:.0} ..= {high:.0} J"
            ));
        }
        let state = r.state.split_whitespace().next().unwrap_or("").to_string();
        let entry = per_state.entry(state).or_default();
        entry.0 += 1;
        entry.1 += joules;
    }
    for (state, (n, j)) in &per_state {
        println!("{state}: {n} runs, {j:.0} J, {:.1} J each", j / *n as f64);
    }
    println!(
        "runs whose job line has no figure (their extern step's taken): {}",
        no_job_line.len()
    );
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &no_job_line {
        *states
            .entry(r.state.split_whitespace().next().unwrap_or(""))
            .or_default() += 1;
    }
    println!("  by state: {states:?}");
    for r in no_job_line.iter().take(4) {
        println!("  {r:?}");
    }
    println!("runs outside their bounds: {}", outside.len());
    for o in outside.iter().take(20) {
        println!("  {o}");
    }
    let error = (sum - soak.powered) / soak.powered;
    println!(
        "Σ jobs {sum:.0} J, node while jobs were on it {:.1} J: {:+.4}%; nobody's {:.0} J at {IDLE_POWER} W",
        soak.powered,
        100.0 * error,
        soak.nobodys
    );
    println!(
        "wall {:.0} s; slurmd before any job (VmRSS KiB, fds, threads) {before:?}; idle after {FIRST} jobs \
         {after_first:?}; after {half} {middle:?}; after {jobs} {at_end:?}; at most {} B / {} B \
         (ledger, metrics) while jobs ran",
        wall.as_secs_f64(),
        soak.largest.0,
        soak.largest.1
    );
    let ids: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.job.as_str()).collect();
    assert_eq!(ids.len(), jobs + anchors, "every job in sacct");
    assert_eq!(
        runs.len(),
        jobs + anchors + by_state("REQUEUED"),
        "every run in sacct -D"
    );
    assert_eq!(by_state("CANCELLED"), cancelled + anchors);
    assert_eq!(by_state("COMPLETED"), jobs - cancelled);
    assert!(
        by_state("REQUEUED") * 10 >= requeued * 9,
        "most requeues asked happened"
    );
    assert!(
        outside.is_empty(),
        "runs outside their bounds:\n{}",
        outside.join("\n")
    );
    assert!(
        error.abs() <= 0.002,
        "Σ jobs {sum} J against {} J while jobs were on the node",
        soak.powered
    );
    // slurmd holds the same once idle: memory within 256 KiB between the middle and the
    // end (after the first jobs it is lower: the allocator keeps what the ledger's
    // steadiest size needed), the same files and threads after the first jobs and after all
    assert!(
        at_end.rss_kib.abs_diff(middle.rss_kib) <= 256,
        "slurmd's VmRSS {} KiB after {half} jobs, {} KiB after {jobs}",
        middle.rss_kib,
        at_end.rss_kib
    );
    for idle in [&middle, &at_end] {
        assert_eq!(idle.fds, after_first.fds, "slurmd's open files");
        assert_eq!(idle.threads, after_first.threads, "slurmd's threads");
        // the files at idle hold the node alone: the same fields, numbers a few digits longer
        for (what, first, then) in [
            ("ledger", after_first.ledger, idle.ledger),
            ("metrics file", after_first.metrics, idle.metrics),
        ] {
            assert!(
                then.abs_diff(first) <= 64,
                "the {what} is {then} B idle later, {first} B idle after {FIRST} jobs"
            );
        }
    }
}
