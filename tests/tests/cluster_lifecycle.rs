//! Slurm's job life cycle on a shared node (`EnergyAttribution=shared`, Slurm's cgroup v1
//! plugins) against the RAPL simulators' truth: a job suspended (`scontrol suspend`) and
//! resumed, in both modes; two jobs gang-scheduled on the same CPUs; a heterogeneous job;
//! two `srun --overlap` steps on one CPU; job array elements side by side.
//!
//! Each scenario sets its nodes' power (300 W) only while its jobs run, so a job's final
//! figure covers the window the test measured. The jobs run until the test creates a stop
//! file: a `while` loop spinning a CPU, or one that sleeps half a second between looks.

use energy_tests as support;

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use support::cluster::{Cgroups, Cluster, ClusterSpec, energy_of, mark};
use support::shared_node::{
    IDLE_WATTS, OFF, ON, RAPL, SIM, cpu_secs, shared_cluster, step_cpu_secs, whole_life_cluster,
    whole_lives,
};
use support::*;

/// The nodes' power while jobs run (`ON`).
const WATTS: f64 = 300.0;
/// Jobs' figures against the node's truth, as the shared-node tests hold them.
const SUM_TOLERANCE: f64 = 0.01;
/// A job's figure against the model computed from the jobs' cgroup CPU time.
const MODEL_TOLERANCE: f64 = 0.03;
/// The killed jobs' sum: each cancelled job's lingering second was about 2% of the sum.
const KILLED_TOLERANCE: f64 = 0.004;
/// Gang scheduling: a time slice of 5 s, two jobs per CPU in partition `gang`.
const GANG_CONF: &str = "PreemptMode=GANG\nSchedulerTimeSlice=5\n\
                         PartitionName=gang Nodes=ALL OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP\n";
/// Heterogeneous jobs are started by the backfill scheduler only: every second, not 30.
const BACKFILL_CONF: &str =
    "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1\n";

/// Shell text: `raplsim mark` on node `k`'s simulator.
fn mark_cmd(cluster: &Cluster, k: usize, name: &str) -> String {
    format!(
        "{} mark {} {name}",
        bin("raplsim").display(),
        cluster.sim(k).dir.display()
    )
}

/// Shell text: spin a CPU until `stop` exists (no single quote: it goes inside them).
fn spin(stop: &Path) -> String {
    format!("while [ ! -e {} ]; do :; done", stop.display())
}

/// Shell text: sleep until `stop` exists.
fn idle(stop: &Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.5; done", stop.display())
}

fn wait_for_marks(cluster: &Cluster, k: usize, names: &[&str]) {
    for name in names {
        cluster.wait_until(
            &format!("mark {name} on n{k}"),
            Duration::from_secs(90),
            || mark(cluster.sim(k), name),
        );
    }
}

/// Ends the jobs waiting on `stop` and waits until they are in accounting.
fn stop_jobs(cluster: &Cluster, stop: &Path, jobs: &[u32]) {
    fs::write(stop, "").expect("stop file");
    for &job in jobs {
        cluster.wait_job(job, Duration::from_secs(90));
    }
}

/// The raw job ids of allocations `ids` of `job` (array elements `J_0`, hetjob components
/// `J+1`): the ids their cgroups are named by. sacct shows a running job once slurmdbd has
/// its start, a moment after it began.
fn raw_ids<const N: usize>(cluster: &Cluster, job: u32, ids: [String; N]) -> [u32; N] {
    let what = format!("sacct showing {ids:?} of job {job}");
    cluster.wait_until(&what, Duration::from_secs(30), || {
        let known: HashMap<String, u32> = cluster
            .run(&[
                "sacct",
                "-n",
                "-P",
                "-X",
                "-j",
                &job.to_string(),
                "-o",
                "JobID,JobIDRaw",
            ])
            .lines()
            .filter_map(|l| {
                let (id, raw) = l.split_once('|')?;
                Some((id.to_string(), raw.trim().parse().ok()?))
            })
            .collect();
        ids.iter()
            .all(|id| known.contains_key(id))
            .then(|| ids.clone().map(|id| known[&id]))
    })
}

/// The model over a window of steady power (`node` joules at [`WATTS`]): each job's static
/// part by the CPUs it holds (`held`, shares summing to 1), the dynamic part by its CPU time
/// (`used`, seconds; by what they hold when nobody used any).
fn model(node: f64, held: &[f64], used: &[f64]) -> Vec<f64> {
    let static_j = IDLE_WATTS * node / WATTS;
    let total: f64 = used.iter().sum();
    held.iter()
        .zip(used)
        .map(|(h, u)| {
            // nobody used CPU: the dynamic part too by what they hold
            let part = if total > 0.0 { u / total } else { *h };
            h * static_j + (node - static_j) * part
        })
        .collect()
}

/// One sample of node `k`'s ledger (slurmd's file that every step reads its figure from):
/// the node's joules and each job's, and the jobs' CPU time read just after. Jobs' figures
/// are held to the model over a window between two such samples, at steady power: both
/// ends are one sample each, so a slurmd that a loaded machine lets publish late cannot
/// skew them (a live figure, `sstat`, is brought forward at most a second); the ledger's
/// node figure is held to the simulator's truth by the final figures. Not over the final
/// figures: an interval of the node's samples that a power step cuts is charged static
/// power over the whole interval (`min(dE, P_static * dt)`), which the model would miss.
struct Point {
    truth: f64,
    energy: Vec<f64>,
    cpu: Vec<f64>,
}

fn point(cluster: &Cluster, k: usize, jobs: &[u32]) -> Point {
    // slurmd replaces the file by a rename: one read is one whole sample
    let (text, ledger) = cluster.ledger(k).expect("the node's ledger");
    let joules = |v: &serde_json::Value| v["joules"].as_f64().expect("joules");
    let energy = jobs
        .iter()
        .map(|&j| {
            let found = ledger["jobs"]
                .as_array()
                .and_then(|all| all.iter().find(|x| x["job"].as_u64() == Some(u64::from(j))));
            joules(&found.unwrap_or_else(|| panic!("job {j} in the ledger: {text}"))["account"])
        })
        .collect();
    Point {
        truth: joules(&ledger["node"]),
        energy,
        cpu: jobs.iter().map(|&j| cpu_secs(j)).collect(),
    }
}

impl Point {
    /// What the node, each job's figure and CPU time did from `self` to `later`.
    fn to(&self, later: &Point) -> (f64, Vec<f64>, Vec<f64>) {
        let delta = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| y - x).collect();
        (
            later.truth - self.truth,
            delta(&self.energy, &later.energy),
            delta(&self.cpu, &later.cpu),
        )
    }
}

/// Each job's figure over the window from `a` to `b` against the model.
fn window_matches_the_model(what: &str, a: &Point, b: &Point, jobs: &[u32]) {
    let (node, paid, used) = a.to(b);
    let held = vec![1.0 / jobs.len() as f64; jobs.len()];
    let predicted = model(node, &held, &used);
    println!("{what}: window of {:.1} s, node {node:.0} J", node / WATTS);
    for (k, job) in jobs.iter().enumerate() {
        assert_close(
            &format!("{what}: job {job} ({:.2} s CPU), window", used[k]),
            paid[k],
            predicted[k],
            MODEL_TOLERANCE,
        );
    }
}

/// Two one-CPU jobs spin side by side; one is suspended for 8 s. Suspended, its tasks are
/// frozen and use no CPU, but its cgroup keeps its CPU: it pays its half of the static power
/// and none of the dynamic part, which the running job pays. Both together get the node's
/// energy over the whole window.
fn suspended_job_in_shared_mode(cluster: &Cluster) {
    let sim = cluster.sim(1);
    let stop = sim.dir.join("stop-suspend");
    let [a, b] = ["a_in", "b_in"].map(|name| {
        cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH -n1 -c1\n{}\n{}\n",
            mark_cmd(cluster, 1, name),
            spin(&stop)
        ))
    });
    wait_for_marks(cluster, 1, &["a_in", "b_in"]);
    // both charged from before the power is on, which is all the final sum needs
    cluster.wait_for_jobs_in_ledger(1, &[a, b]);
    let on = sim.truth();
    sim.set(&[ON]);
    cluster.wait_past_power_step(1);
    cluster.run(&["scontrol", "suspend", &a.to_string()]);
    // the freezer stops the job's tasks a moment after slurmctld calls it suspended; the
    // window starts at a sample after that
    cluster.wait_until(
        &format!("job {a}'s tasks frozen"),
        Duration::from_secs(30),
        || {
            let before = cpu_secs(a);
            sleep(Duration::from_millis(300));
            (cpu_secs(a) - before < 0.005).then_some(())
        },
    );
    cluster.wait_for_samples(1, 2);
    let p0 = point(cluster, 1, &[a, b]);
    sleep(Duration::from_secs(8));
    let p1 = point(cluster, 1, &[a, b]);
    cluster.run(&["scontrol", "resume", &a.to_string()]);
    sleep(Duration::from_secs(3));
    sim.set(&[OFF]);
    let off = sim.truth();
    stop_jobs(cluster, &stop, &[a, b]);

    let (node, paid, cpu) = p0.to(&p1);
    println!(
        "suspended {:.1} s: node {node:.0} J; suspended job {a}: {:.2} s CPU, {:.0} J; \
         running job {b}: {:.2} s CPU, {:.0} J",
        node / WATTS,
        cpu[0],
        paid[0],
        cpu[1],
        paid[1]
    );
    assert!(
        cpu[0] < 0.05,
        "the suspended job used {:.2} s of CPU",
        cpu[0]
    );
    assert_close(
        "suspended job: half the static power",
        paid[0],
        IDLE_WATTS / 2.0 * node / WATTS,
        MODEL_TOLERANCE,
    );
    window_matches_the_model("suspended", &p0, &p1, &[a, b]);

    let figure = |j: u32| energy_of(&cluster.energy(j), &j.to_string());
    let (fa, fb) = (figure(a), figure(b));
    println!("final: suspended-and-resumed job {fa} J, the other {fb} J");
    assert_close(
        "shared: the two jobs vs the node",
        fa + fb,
        off - on,
        SUM_TOLERANCE,
    );
    assert!(fa < fb, "the job suspended a while pays less");
}

/// Two jobs holding both CPUs in partition `gang` take turns (5 s slices, the other
/// suspended). Each holds the node's two CPUs, so each pays half the static power; the
/// dynamic part goes to the one running: each ran about half the time and pays about
/// half. Together they get the node's energy.
fn gang_scheduled_jobs(cluster: &Cluster) {
    let sim = cluster.sim(1);
    let stop = sim.dir.join("stop-gang");
    // the batch step spins: an srun step of a job suspended by the gang scheduler as it
    // starts waits for step creation until srun's next retry, up to a minute later
    let jobs = ["g1_in", "g2_in"].map(|name| {
        cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH -p gang -n1 -c2\n{}\n{}\n",
            mark_cmd(cluster, 1, name),
            spin(&stop)
        ))
    });
    wait_for_marks(cluster, 1, &["g1_in", "g2_in"]);
    // the model per half second: which job runs changes every slice, and how much CPU the
    // running one gets changes with the machine's load, so the window's CPU time alone
    // does not tell each job's part of the dynamic power
    let mut predicted = [0.0; 2];
    let mut ran = [0.0; 2];
    let mut last = (sim.truth(), jobs.map(cpu_secs));
    let on = last.0;
    sim.set(&[ON]);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        sleep(Duration::from_millis(500));
        let over = Instant::now() >= end;
        if over {
            sim.set(&[OFF]);
        }
        let now = (sim.truth(), jobs.map(cpu_secs));
        let used = [now.1[0] - last.1[0], now.1[1] - last.1[1]];
        for (k, share) in model(now.0 - last.0, &[0.5, 0.5], &used)
            .into_iter()
            .enumerate()
        {
            predicted[k] += share;
            ran[k] += used[k] / (used[0] + used[1]).max(1e-9);
        }
        last = now;
        if over {
            break;
        }
    }
    let node = last.0 - on;
    stop_jobs(cluster, &stop, &jobs);

    // Final figures, not a window of ledger samples or live ones: each job's power changes
    // every slice (from 250 to 50 W here), so a window's ends must be the model's (a live
    // figure is brought forward at the job's last power; a ledger sample is slurmd's
    // moment, not the test's). The final ones cover the model's span, ON to OFF, and take
    // in the two power steps, where the node's sample interval that the
    // step cuts is charged static power over the whole interval (`min(dE, P_static * dt)`):
    // at most `P_static * (1 - P_static / P)` joules per 1 s interval more than the model's
    // static part, taken from the running job's dynamic part and split by half.
    let edges = IDLE_WATTS * (1.0 - IDLE_WATTS / WATTS);
    let samples = ran[0] + ran[1];
    let figures = jobs.map(|j| energy_of(&cluster.energy(j), &j.to_string()));
    for k in 0..2 {
        println!(
            "gang: job {}: ran {:.0}% of the time, {:.0} J of the node's {node:.0} J, \
             model {:.0} J",
            jobs[k],
            100.0 * ran[k] / samples,
            figures[k],
            predicted[k]
        );
    }
    assert_close(
        "gang: the two jobs vs the node",
        figures[0] + figures[1],
        node,
        SUM_TOLERANCE,
    );
    for k in 0..2 {
        assert!(
            // 5 s slices in a 20 s window: two each, unless slurmctld's slices stretch
            (0.2..0.8).contains(&(ran[k] / samples)),
            "gang: job {} ran {:.0}% of the time: they did not take turns",
            jobs[k],
            100.0 * ran[k] / samples
        );
        assert_close(
            &format!("gang: job {}", jobs[k]),
            figures[k],
            predicted[k],
            MODEL_TOLERANCE + edges / predicted[k],
        );
    }
}

/// In node mode a job suspended mid-life is charged the node's energy over its whole life,
/// the suspension included, as Slurm's own plugins charge it: a step's figure is the
/// node's energy between its first and last readings.
fn suspended_job_in_node_mode(cluster: &Cluster) {
    let sim = cluster.sim(1);
    let stop = sim.dir.join("stop-node");
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{}\n{}\n",
        mark_cmd(cluster, 1, "n_in"),
        idle(&stop)
    ));
    wait_for_marks(cluster, 1, &["n_in"]);
    sleep(Duration::from_secs(1));
    let on = sim.truth();
    sim.set(&[ON]);
    sleep(Duration::from_secs(3));
    cluster.run(&["scontrol", "suspend", &job.to_string()]);
    sleep(Duration::from_secs(6));
    cluster.run(&["scontrol", "resume", &job.to_string()]);
    sleep(Duration::from_secs(3));
    sim.set(&[OFF]);
    let off = sim.truth();
    stop_jobs(cluster, &stop, &[job]);
    assert_close(
        "node: a job suspended 6 s of 12",
        energy_of(&cluster.energy(job), &job.to_string()),
        off - on,
        SUM_TOLERANCE,
    );
}

#[test]
fn suspended_and_gang_scheduled_jobs_in_both_modes() {
    let Some(tmp) = root_test_dir("suspended_and_gang_scheduled_jobs_in_both_modes") else {
        return;
    };
    let shared = shared_cluster(&tmp.path().join("shared"), GANG_CONF);
    suspended_job_in_shared_mode(&shared);
    gang_scheduled_jobs(&shared);
    drop(shared);
    let node = Cluster::up(
        &tmp.path().join("node"),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\nEnergyAttribution=node\n",
            sim_args: vec![Some(SIM)],
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    suspended_job_in_node_mode(&node);
}

/// Nodes `ks` at [`WATTS`] while `during` runs, from each node's first ledger sample past
/// the power step ([`Cluster::wait_past_power_step`]: the window of steady power it
/// measures) to 1 s before it is off: each node's true joules, and what `during` returned.
fn powered<T>(cluster: &Cluster, ks: &[usize], during: impl FnOnce() -> T) -> (Vec<f64>, T) {
    let on: Vec<f64> = ks.iter().map(|&k| cluster.sim(k).truth()).collect();
    for &k in ks {
        cluster.sim(k).set(&[ON]);
    }
    for &k in ks {
        cluster.wait_past_power_step(k);
    }
    let measured = during();
    sleep(Duration::from_secs(1));
    for &k in ks {
        cluster.sim(k).set(&[OFF]);
    }
    let truth = ks
        .iter()
        .zip(on)
        .map(|(&k, on)| cluster.sim(k).truth() - on)
        .collect();
    (truth, measured)
}

/// A heterogeneous job, one component on each node: component 0 spins alone on n1, component
/// 1 sleeps on n2 beside a job whose two `srun --overlap` steps spin on its one CPU. Each
/// component is a job of its own on its node (its own id and cgroup) and gets its share of
/// that node; the overlapping steps split their job's share by their CPU time.
///
/// The scripts are bash's: Slurm 25.05's slurmstepd starts a batch script with SIGCHLD
/// blocked (slurmstepd.c `_main_thread_init`; 25.11 unblocks it before the exec), and dash's
/// `wait` then never returns.
fn hetjob_and_overlapping_steps(cluster: &Cluster) {
    let stop = cluster.sim(1).dir.join("stop-het");
    let overlap = cluster.sbatch(&format!(
        "#!/bin/bash\n#SBATCH -w n2 -n1 -c1\n\
         srun --overlap -n1 sh -c '{}; {}' &\nsrun --overlap -n1 sh -c '{}; {}' &\nwait\n",
        mark_cmd(cluster, 2, "ov0_in"),
        spin(&stop),
        mark_cmd(cluster, 2, "ov1_in"),
        spin(&stop)
    ));
    let het = cluster.sbatch(&format!(
        "#!/bin/bash\n#SBATCH -w n1 -n1 -c1\n#SBATCH hetjob\n#SBATCH -w n2 -n1 -c1\n\
         srun --het-group=0 sh -c '{}; {}' &\nsrun --het-group=1 sh -c '{}; {}' &\nwait\n",
        mark_cmd(cluster, 1, "het0_in"),
        spin(&stop),
        mark_cmd(cluster, 2, "het1_in"),
        idle(&stop)
    ));
    wait_for_marks(cluster, 1, &["het0_in"]);
    wait_for_marks(cluster, 2, &["het1_in", "ov0_in", "ov1_in"]);
    let [het1] = raw_ids(cluster, het, [format!("{het}+1")]);
    // each charged from before the power is on, which is all the final sums need
    cluster.wait_for_jobs_in_ledger(1, &[het]);
    cluster.wait_for_jobs_in_ledger(2, &[het1, overlap]);
    let steps_cpu = || ["0", "1", "batch"].map(|s| step_cpu_secs(overlap, s));
    let (truth, (p0, p1, steps0, steps1)) = powered(cluster, &[1, 2], || {
        let (p0, steps0) = (point(cluster, 2, &[het1, overlap]), steps_cpu());
        sleep(Duration::from_secs(8));
        (p0, point(cluster, 2, &[het1, overlap]), steps0, steps_cpu())
    });
    stop_jobs(cluster, &stop, &[het, overlap]);

    let het_rows = cluster.energy(het);
    let ov_rows = cluster.energy(overlap);
    println!("hetjob {het}: {het_rows:?}\noverlap {overlap}: {ov_rows:?}");
    println!("n1 {:.0} J, n2 {:.0} J", truth[0], truth[1]);
    window_matches_the_model(
        "n2: hetjob component 1 and the overlap job",
        &p0,
        &p1,
        &[het1, overlap],
    );
    let fig = |rows: &[(String, Option<u64>)], id: String| energy_of(rows, &id);
    let c0 = fig(&het_rows, format!("{het}+0"));
    let c1 = fig(&het_rows, format!("{het}+1"));
    let ov = fig(&ov_rows, overlap.to_string());
    assert_close("component 0, alone on n1", c0, truth[0], SUM_TOLERANCE);
    assert_close(
        "n2: component 1 + the overlap job",
        c1 + ov,
        truth[1],
        SUM_TOLERANCE,
    );
    // sacct shows a line per component and none for the whole: the job's total is theirs
    println!(
        "hetjob total (sacct's component lines): {:.0} J = {c0:.0} + {c1:.0} J",
        c0 + c1
    );
    assert!(
        !het_rows.iter().any(|(id, _)| *id == het.to_string()),
        "sacct shows no line for the hetjob as a whole: {het_rows:?}"
    );

    let steps = ["0", "1", "batch"].map(|s| fig(&ov_rows, format!("{overlap}.{s}")));
    assert_close(
        "overlap: steps 0 + 1 + batch vs the job",
        steps.iter().sum(),
        ov,
        SUM_TOLERANCE,
    );
    // the steps' CPU time in the window stands for the whole: both spin on one CPU
    let used: Vec<f64> = steps1.iter().zip(steps0).map(|(b, a)| b - a).collect();
    let inner: f64 = used.iter().sum();
    println!("overlap: CPU time of steps 0, 1, batch in the window: {used:.2?}");
    for (k, s) in ["0", "1"].iter().enumerate() {
        assert_close(
            &format!("overlap step {s}, by its CPU time"),
            steps[k],
            ov * used[k] / inner,
            MODEL_TOLERANCE,
        );
    }
}

/// Two elements of a job array side by side on n1, one spinning, one sleeping: each is a
/// job of its own (its own id and cgroup) and gets its share.
fn array_elements_side_by_side(cluster: &Cluster) {
    let stop = cluster.sim(1).dir.join("stop-array");
    let array = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -w n1 -n1 -c1 --array=0-1\n{} \"arr${{SLURM_ARRAY_TASK_ID}}_in\"\n\
         if [ \"$SLURM_ARRAY_TASK_ID\" = 0 ]; then {}; else {}; fi\n",
        mark_cmd(cluster, 1, ""),
        spin(&stop),
        idle(&stop)
    ));
    wait_for_marks(cluster, 1, &["arr0_in", "arr1_in"]);
    let elements = raw_ids(cluster, array, [0, 1].map(|k| format!("{array}_{k}")));
    cluster.wait_for_jobs_in_ledger(1, &elements);
    let (truth, (p0, p1)) = powered(cluster, &[1], || {
        let p0 = point(cluster, 1, &elements);
        sleep(Duration::from_secs(8));
        (p0, point(cluster, 1, &elements))
    });
    stop_jobs(cluster, &stop, &[array]);
    let rows = cluster.energy(array);
    println!("array {array}: {rows:?}");
    window_matches_the_model("array elements", &p0, &p1, &elements);
    let figures = [0, 1].map(|k| energy_of(&rows, &format!("{array}_{k}")));
    assert_close(
        "array: both elements vs n1",
        figures[0] + figures[1],
        truth[0],
        SUM_TOLERANCE,
    );
}

/// Jobs killed as they run (Slurm signals all their steps at once, and their slurmstepds
/// linger a second or more after their last reads) are charged up to those reads and no
/// more: what the node draws after is the jobs' still on it. Beside an anchor job, six short
/// jobs one after the other, three of them cancelling themselves: their figures and the
/// anchor's add up to the node's energy. Before, each cancelled job was charged its
/// lingering second after its figures were taken, and that was in nobody's.
fn killed_jobs_beside_an_anchor(cluster: &Cluster) {
    let stop = cluster.sim(1).dir.join("stop-anchor");
    let anchor = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -w n1 -n1 -c1\n{} anchor_in\n{}\n",
        mark_cmd(cluster, 1, ""),
        idle(&stop)
    ));
    wait_for_marks(cluster, 1, &["anchor_in"]);
    let (truth, array) = powered(cluster, &[1], || {
        let array = cluster.sbatch(
            "#!/bin/sh\n#SBATCH -w n1 -n1 -c1 --array=0-5%1\nsleep 2\n\
             if [ $((SLURM_ARRAY_TASK_ID % 2)) = 1 ]; then \
             scancel ${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID; sleep 60; fi\n",
        );
        cluster.wait_job(array, Duration::from_secs(120));
        array
    });
    stop_jobs(cluster, &stop, &[anchor]);
    let rows = [cluster.energy(anchor), cluster.energy(array)].concat();
    println!("anchor {anchor}, array {array}: {rows:?}");
    // a cancelled job's line has no figure: its extern step's is the job's (Contain)
    let figure = |id: String| {
        let of = |id: &str| rows.iter().find(|(i, _)| i == id).and_then(|(_, e)| *e);
        of(&id)
            .or_else(|| of(&format!("{id}.extern")))
            .unwrap_or_else(|| panic!("no figure for {id} in {rows:?}")) as f64
    };
    let cancelled = rows
        .iter()
        .filter(|(i, _)| !i.contains('.'))
        .filter(|(i, _)| {
            cluster
                .run(&["sacct", "-n", "-X", "-P", "-j", i, "-o", "State"])
                .starts_with("CANCELLED")
        })
        .count();
    assert_eq!(cancelled, 3, "three elements cancelled");
    let sum: f64 = std::iter::once(anchor.to_string())
        .chain((0..6).map(|k| format!("{array}_{k}")))
        .map(figure)
        .sum();
    assert_close(
        "killed jobs and the anchor vs n1",
        sum,
        truth[0],
        KILLED_TOLERANCE,
    );
}

/// Needs a second node: Slurm's backfill scheduler, which alone starts heterogeneous jobs,
/// plans each component on a node of its own.
#[test]
fn a_hetjob_overlapping_steps_array_elements_and_killed_jobs_get_their_shares() {
    let Some(tmp) =
        root_test_dir("a_hetjob_overlapping_steps_array_elements_and_killed_jobs_get_their_shares")
    else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 2,
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution=shared\nEnergyAttributionIdleWatts={IDLE_WATTS}\n"
            ),
            sim_args: vec![Some(SIM); 2],
            extra_conf: BACKFILL_CONF,
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    hetjob_and_overlapping_steps(&cluster);
    array_elements_side_by_side(&cluster);
    killed_jobs_beside_an_anchor(&cluster);
}

/// The node half of `cluster_shared`'s whole-life test ([`whole_lives`]): a job's figure in
/// `node` mode is never more than its life's and never a second of it short, which a loaded
/// machine does not move.
#[test]
fn a_job_is_charged_over_its_whole_life_in_node_mode() {
    let Some(tmp) = root_test_dir("a_job_is_charged_over_its_whole_life_in_node_mode") else {
        return;
    };
    whole_lives(&whole_life_cluster(tmp.path(), false), false);
}
