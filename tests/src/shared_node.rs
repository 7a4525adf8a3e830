//! Shared-node scenarios (`EnergyAttribution=shared` over Slurm's cgroup plugins) for
//! the cluster tests: the RAPL simulator gives the node's true joules, and the test reads
//! the jobs' cgroup CPU time itself to compute what the model gives each job.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::Duration;

use crate::cluster::{Cgroups, Cluster, ClusterSpec, cgroups, energy_of, mark};
use crate::stepds::StepdWatch;
use crate::{assert_close, assert_watts, bin};

/// What [`two_jobs_share_the_node`]'s busy job does besides spinning (an attack, say):
/// shell lines in its batch script before its srun step (the idle job is then submitted
/// once they have run), a shell command its srun step runs before it spins (quoted in
/// double quotes inside single ones: no single quote), and what the test does once both
/// jobs run (given their ids), before the window it measures.
#[derive(Default)]
pub struct TwoJobs<'a> {
    pub busy_batch: &'a str,
    pub busy_step: &'a str,
    pub during: Option<&'a dyn Fn(u32, u32)>,
}

pub const RAPL: &str = "acct_gather_energy/rust_rapl";
/// One AMD package: the node's power is package0's.
pub const SIM: &str = "--vendor amd --packages 1 --cpus 2";
/// `EnergyAttributionIdleWatts` of the shared clusters.
pub const IDLE_WATTS: f64 = 100.0;
/// The node's power in the measured window, and after it.
pub const ON: &str = "package0=300";
pub const OFF: &str = "package0=0";
/// One node in `shared` mode over Slurm's cgroup v1 plugins, which `shared` reads the
/// jobs' CPU time from (`extra_conf`: more slurm.conf lines).
pub fn shared_cluster(root: &std::path::Path, extra_conf: &str) -> Cluster {
    shared_cluster_on(root, extra_conf, Cgroups::V1)
}

/// [`shared_cluster`] over `cgroups`.
pub fn shared_cluster_on(root: &std::path::Path, extra_conf: &str, cgroups: Cgroups) -> Cluster {
    Cluster::up(
        root,
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution=shared\nEnergyAttributionIdleWatts={IDLE_WATTS}\n"
            ),
            sim_args: vec![Some(SIM)],
            extra_conf,
            cgroups,
            ..ClusterSpec::default()
        },
    )
}

/// Waits (a minute at most) for a job to write mark `name` on node 1's simulator.
pub fn wait_for_mark(cluster: &Cluster, name: &str) {
    cluster.wait_until(&format!("mark {name}"), Duration::from_secs(60), || {
        mark(cluster.sim(1), name)
    });
}

/// The job's CPU time so far, read from Slurm's cgroup tree (v1 or v2) as the model reads it.
pub fn cpu_secs(job: u32) -> f64 {
    cgroup_cpu_secs(job, None)
}

/// Step `step` (`0`, `batch`) of job `job`: its CPU time so far, as [`cpu_secs`] reads it.
pub fn step_cpu_secs(job: u32, step: &str) -> f64 {
    cgroup_cpu_secs(job, Some(step))
}

/// The CPU time of job `job`'s cgroup, or of its step `step`'s: under the uid directory of
/// Slurm's cgroup v1 tree, else in the test clusters' v2 subtrees ([`cgroups::v2_root`]).
/// On this host under any slurmd's root: the job ids differ.
fn cgroup_cpu_secs(job: u32, step: Option<&str>) -> f64 {
    let dir = match step {
        Some(s) => format!("job_{job}/step_{s}"),
        None => format!("job_{job}"),
    };
    let root = PathBuf::from("/sys/fs/cgroup/cpuacct");
    let v1 = fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurm"))
        .flat_map(|slurm| fs::read_dir(slurm.path()).into_iter().flatten().flatten())
        .map(|uid| uid.path().join(&dir).join("cpuacct.usage"))
        .find(|p| p.exists());
    if let Some(found) = v1 {
        let ns: f64 = fs::read_to_string(&found)
            .expect("cpuacct.usage")
            .trim()
            .parse()
            .expect("ns");
        return ns / 1e9;
    }
    let found = v2_cgroup(job, step)
        .unwrap_or_else(|| panic!("no cgroup {dir} under {} nor a v2 one", root.display()));
    let stat = fs::read_to_string(found.join("cpu.stat")).expect("cpu.stat");
    let usec: f64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no usage_usec in {}: {stat}", found.display()));
    usec / 1e6
}

/// Job `job`'s cgroup v2 directory, or its step `step`'s, found from where a slurmstepd of
/// it (`slurmstepd: [J.S]`) is: v2 job directories are named by SLUID from 26.05 on. This
/// process sees /proc/PID/cgroup's paths from the machine's unified root, above the nodes'
/// cgroup namespaces.
fn v2_cgroup(job: u32, step: Option<&str>) -> Option<PathBuf> {
    let title = match step {
        Some(s) => format!("slurmstepd: [{job}.{s}]"),
        None => format!("slurmstepd: [{job}."),
    };
    fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let cmdline = fs::read(p.path().join("cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).starts_with(&title) {
            return None;
        }
        let text = fs::read_to_string(p.path().join("cgroup")).ok()?;
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        // `<job>/step_<id>/slurm`: the step's directory is the last `step_`, the job's above
        let parts: Vec<&str> = path.split('/').collect();
        let at = parts.iter().rposition(|c| c.starts_with("step_"))?;
        let end = if step.is_some() { at + 1 } else { at };
        Some(Path::new(cgroups::CGROUP_V2_HOST).join(parts[1..end].join("/")))
    })
}

/// The live energy of a step (`sstat`).
fn live(cluster: &Cluster, step: &str) -> f64 {
    let out = cluster.run(&["sstat", "-n", "-P", "-j", step, "-o", "ConsumedEnergyRaw"]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("sstat {step} said {out:?}"))
}

/// Waits until slurmd charges `jobs` (its ledger lists them) and each of `steps` answers
/// `sstat` with a figure: what a window of snapshots needs of them, and the final sum
/// of their power from then on.
pub fn wait_until_charged(cluster: &Cluster, steps: &[Vec<String>], jobs: &[u32]) {
    cluster.wait_for_jobs_in_ledger(1, jobs);
    for step in steps.iter().flatten() {
        cluster.wait_until(
            &format!("a live figure of step {step}"),
            Duration::from_secs(30),
            || {
                let out = cluster.try_run(&[
                    "sstat",
                    "-n",
                    "-P",
                    "-j",
                    step,
                    "-o",
                    "ConsumedEnergyRaw",
                ])?;
                out.trim().parse::<f64>().ok()
            },
        );
    }
}

struct Snapshot {
    /// The node's truth over the whole snapshot.
    truth: f64,
    energy: Vec<f64>,
    /// The node's truth around each job's reading: the jobs are read one after the other,
    /// and on a busy machine a second or more apart.
    truth_at: Vec<f64>,
    cpu: Vec<f64>,
}

/// Each job's live energy (the sum of `steps`' for it), CPU time and the node's truth.
fn snapshot(cluster: &Cluster, steps: &[Vec<String>], jobs: &[u32]) -> Snapshot {
    let sim = cluster.sim(1);
    let first = sim.truth();
    let (energy, truth_at) = steps
        .iter()
        .map(|of_job| {
            let before = sim.truth();
            let energy: f64 = of_job.iter().map(|s| live(cluster, s)).sum();
            (energy, (before + sim.truth()) / 2.0)
        })
        .unzip();
    Snapshot {
        energy,
        truth_at,
        cpu: jobs.iter().map(|&j| cpu_secs(j)).collect(),
        truth: (first + sim.truth()) / 2.0,
    }
}

/// Two one-CPU jobs, one spinning (in an srun step) and one sleeping, share the node;
/// `contain`: PrologFlags=Contain, where the extern step carries each job's figure; without
/// it, the job's steps (batch and srun) add up to it, and sacct's job line leaves out the
/// batch step (slurmctld never adds its energy).
/// Checks each job's energy over a window of steady power against the model computed
/// from the simulator's truth and the jobs' cgroup CPU time, and the final sum against the
/// node's truth. `extra`: what the busy job does besides (nothing by default). Returns the
/// busy job's id and the idle one's.
pub fn two_jobs_share_the_node(cluster: &Cluster, contain: bool, extra: &TwoJobs) -> [u32; 2] {
    let sim = cluster.sim(1);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let spin = "timeout 30 sh -c 'while :; do :; done'";
    let step = if extra.busy_step.is_empty() {
        spin.to_string()
    } else {
        format!(
            "sh -c '{}; exec {}'",
            extra.busy_step,
            spin.replace('\'', "\"")
        )
    };
    let busy = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{}\n{raplsim} mark {d} busy_in\nsrun -n1 {step}\n",
        extra.busy_batch
    ));
    if !extra.busy_batch.is_empty() {
        // what the busy job does first is done before the idle job starts
        wait_for_mark(cluster, "busy_in");
    }
    let idle = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} idle_in\nsleep 30\n"
    ));
    wait_for_mark(cluster, "busy_in");
    wait_for_mark(cluster, "idle_in");
    let steps: Vec<Vec<String>> = if contain {
        vec![
            vec![format!("{busy}.extern")],
            vec![format!("{idle}.extern")],
        ]
    } else {
        vec![
            vec![format!("{busy}.batch"), format!("{busy}.0")],
            vec![format!("{idle}.batch")],
        ]
    };
    wait_until_charged(cluster, &steps, &[busy, idle]);
    if let Some(during) = extra.during {
        during(busy, idle);
    }
    let on = sim.truth();
    sim.set(&[ON]);
    // live figures are brought forward at the power slurmd publishes, taken over windows
    // of a second or more closed at settled samples: a window of time past the power step,
    // not a count of samples (a step's ring makes a sample milliseconds after the last)
    sleep(Duration::from_secs(4));
    let a = snapshot(cluster, &steps, &[busy, idle]);
    sleep(Duration::from_secs(10));
    let b = snapshot(cluster, &steps, &[busy, idle]);
    sleep(Duration::from_secs(3));
    sim.set(&[OFF]);
    let off = sim.truth();

    // the model over the window: power is steady, so the static part is the idle watts'
    let node = b.truth - a.truth;
    let secs = node / 300.0;
    let used: Vec<f64> = a.cpu.iter().zip(&b.cpu).map(|(x, y)| y - x).collect();
    let total_used: f64 = used.iter().sum();
    println!(
        "window {secs:.1} s, node {node:.0} J, CPU time busy {:.2} s idle {:.2} s",
        used[0], used[1]
    );
    for (k, name) in ["busy", "idle"].iter().enumerate() {
        // over this job's own window, between its two readings
        let node_k = b.truth_at[k] - a.truth_at[k];
        let static_k = IDLE_WATTS * node_k / 300.0;
        let predicted = static_k / 2.0 + (node_k - static_k) * used[k] / total_used;
        let measured = b.energy[k] - a.energy[k];
        println!(
            "{name}: measured {measured:.0} J, model {predicted:.0} J ({:+.2}%)",
            100.0 * (measured - predicted) / predicted
        );
        assert_close(name, measured, predicted, 0.03);
    }
    let measured: f64 = (0..2).map(|k| b.energy[k] - a.energy[k]).sum();
    println!("window sum {measured:.0} J, node {node:.0} J");
    assert_close("window sum", measured, node, 0.01);
    assert!(
        b.energy[0] - a.energy[0] > b.energy[1] - a.energy[1],
        "the busy job pays more"
    );

    for job in [busy, idle] {
        cluster.wait_job(job, Duration::from_secs(90));
    }
    let truth = off - on;
    let rows: Vec<_> = [busy, idle].iter().map(|&j| cluster.energy(j)).collect();
    for r in &rows {
        println!("{r:?}");
    }
    let figures: f64 = steps
        .iter()
        .zip(&rows)
        .map(|(of_job, r)| of_job.iter().map(|s| energy_of(r, s)).sum::<f64>())
        .sum();
    println!("final: jobs {figures:.0} J, node truth {truth:.1} J");
    assert_close("jobs' sum", figures, truth, 0.01);
    if contain {
        // sacct's job line is the extern step, which the batch and srun steps split
        for (j, r) in [busy, idle].iter().zip(&rows) {
            let job = energy_of(r, &j.to_string());
            assert_close("job line", job, energy_of(r, &format!("{j}.extern")), 0.0);
        }
        let inner = energy_of(&rows[0], &format!("{busy}.batch"))
            + energy_of(&rows[0], &format!("{busy}.0"));
        assert_close(
            "batch + srun step",
            inner,
            energy_of(&rows[0], &busy.to_string()),
            0.01,
        );
    } else {
        // sacct's job line, where it shows one, is the sum of the steps slurmctld completes
        // as steps: the batch step's completion (REQUEST_COMPLETE_BATCH_SCRIPT) deletes its
        // record without adding its energy to the job's (proc_req.c, 22.05 to 26.05)
        for ((j, r), of_job) in [busy, idle].iter().zip(&rows).zip(&steps) {
            if let Some((_, Some(job))) = r.iter().find(|(id, _)| *id == j.to_string()) {
                let sum: f64 = of_job
                    .iter()
                    .filter(|s| !s.ends_with(".batch"))
                    .map(|s| energy_of(r, s))
                    .sum();
                assert_close("job line", *job as f64, sum, 0.0);
            }
        }
    }
    [busy, idle]
}

/// The power of [`a_constant_node`]: it draws this whatever runs.
pub const CONSTANT_WATTS: f64 = 200.0;

/// One node in `shared` mode without `EnergyAttributionIdleWatts`, drawing a constant
/// [`CONSTANT_WATTS`] whatever runs, over counters that advance every `tick_ms`: its
/// static power is all it draws, and the split learns it.
pub fn a_constant_node(root: &std::path::Path, tick_ms: u32) -> Cluster {
    Cluster::up(
        root,
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\nEnergyAttribution=shared\n",
            sim_args: vec![Some(&format!(
                "{SIM} --watts {CONSTANT_WATTS} --tick-ms {tick_ms}"
            ))],
            cgroups: Cgroups::V1,
            // CurrentWatts taken at each second's sample
            node_freq: 1,
            ..ClusterSpec::default()
        },
    )
}

/// The static power node 1's ledger has learned (`floor_watts`), once it has.
pub fn learned_static_watts(cluster: &Cluster) -> Option<f64> {
    cluster.ledger(1)?.1["floor_watts"].as_f64()
}

/// Waits (30 s at most) for node 1's ledger to learn its static power, and returns it.
pub fn wait_for_learned_static_watts(cluster: &Cluster) -> f64 {
    cluster.wait_until("a static power learned", Duration::from_secs(30), || {
        learned_static_watts(cluster)
    })
}

/// The median of five `CurrentWatts` of node n1, a second apart (AcctGatherNodeFreq=1:
/// five windows), so that two windows a loaded machine starved of samples move nothing.
pub fn current_watts(cluster: &Cluster) -> f64 {
    let mut reads: Vec<f64> = (0..5)
        .map(|k| {
            if k > 0 {
                sleep(Duration::from_secs(1));
            }
            let out = cluster.run(&["scontrol", "show", "node", "n1"]);
            out.split_whitespace()
                .find_map(|w| w.strip_prefix("CurrentWatts="))
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("no CurrentWatts in {out}"))
        })
        .collect();
    reads.sort_by(f64::total_cmp);
    println!("CurrentWatts read {reads:?}");
    reads[2]
}

/// On [`a_constant_node`] (PrologFlags=Contain), a spinning and a sleeping one-CPU job hold
/// the node's two CPUs: each pays half of what it draws, whatever the counters' step. The
/// node is measured over counters stepping every `ticks[0]` ms, then each next tick in turn
/// (`raplsim tick`): each phase checks the learned static power (within 3% of
/// [`CONSTANT_WATTS`]), CurrentWatts (within 3%) and the two jobs' live energy over 10 s
/// (within 5% of each other, and adding up to the node's). At the end, the sleeping job's
/// peak power (its batch step's TRESUsageOutMax) is its half of the node within 3%.
pub fn equal_holdings_pay_alike(cluster: &Cluster, ticks: &[u32]) {
    let sim = cluster.sim(1);
    let raplsim = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let learned = wait_for_learned_static_watts(cluster);
    println!("learned static power before any job: {learned:.1} W");
    assert_watts("static power", learned, CONSTANT_WATTS, 0.03);

    // each phase: a 10 s window, its reads and CurrentWatts' (about 18 s), 2 s after a tick
    let phase_secs = 20 * ticks.len() as u32;
    let busy = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} busy_in\n\
         srun -n1 timeout {} sh -c 'while :; do :; done'\n",
        phase_secs + 30
    ));
    wait_for_mark(cluster, "busy_in");
    let idle = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -n1 -c1\n{raplsim} mark {d} idle_in\nsleep {}\n{raplsim} mark {d} idle_out\n",
        phase_secs + 6
    ));
    wait_for_mark(cluster, "idle_in");
    let steps = [
        vec![format!("{busy}.extern")],
        vec![format!("{idle}.extern")],
    ];
    wait_until_charged(cluster, &steps, &[busy, idle]);
    for (k, &tick) in ticks.iter().enumerate() {
        if k > 0 {
            // the spans that end in this phase's window end at samples of the new step,
            // which is all a span's error comes from (a step's worth at each end)
            sim.tick(tick);
            sleep(Duration::from_secs(2));
        }
        let a = snapshot(cluster, &steps, &[busy, idle]);
        sleep(Duration::from_secs(10));
        let b = snapshot(cluster, &steps, &[busy, idle]);
        let node = b.truth - a.truth;
        let paid: Vec<f64> = (0..2).map(|j| b.energy[j] - a.energy[j]).collect();
        let used: Vec<f64> = (0..2).map(|j| b.cpu[j] - a.cpu[j]).collect();
        let learned = learned_static_watts(cluster).expect("learned static power");
        let watts = current_watts(cluster);
        println!(
            "counters stepping every {tick} ms: static power learned {learned:.1} W, \
             CurrentWatts {watts} W (true {CONSTANT_WATTS} W); over {:.1} s the node drew \
             {node:.0} J: busy job {:.0} J ({:.2} CPU-s), idle job {:.0} J ({:.2} CPU-s), \
             {:+.2}% apart",
            node / CONSTANT_WATTS,
            paid[0],
            used[0],
            paid[1],
            used[1],
            200.0 * (paid[0] - paid[1]) / (paid[0] + paid[1])
        );
        assert!(
            used[0] > 5.0 * used[1].max(0.01),
            "the busy job spins: {used:?}"
        );
        assert_watts(
            &format!("static power at {tick} ms"),
            learned,
            CONSTANT_WATTS,
            0.03,
        );
        assert_watts(
            &format!("CurrentWatts at {tick} ms"),
            watts,
            CONSTANT_WATTS,
            0.03,
        );
        // each job against the two's mean: within 5% of each other
        let mean = (paid[0] + paid[1]) / 2.0;
        assert_close(&format!("busy job at {tick} ms"), paid[0], mean, 0.025);
        assert_close(&format!("idle job at {tick} ms"), paid[1], mean, 0.025);
        assert_close(
            &format!("the jobs' sum at {tick} ms"),
            paid[0] + paid[1],
            node,
            0.02,
        );
    }
    cluster.wait_job(idle, Duration::from_secs(60));
    assert!(
        mark(sim, "idle_out").is_some(),
        "the idle job ended before its end:\n{}",
        cluster.logs()
    );
    cluster.run(&["scancel", &busy.to_string()]);
    cluster.wait_job(busy, Duration::from_secs(60));
    let peaks = cluster.peak_watts(idle);
    println!("the idle job's peak powers: {peaks:?}");
    let batch = peaks
        .iter()
        .find(|(id, _)| *id == format!("{idle}.batch"))
        .map(|(_, w)| *w)
        .unwrap_or_else(|| panic!("no peak power for {idle}.batch in {peaks:?}"));
    assert_watts(
        "the idle job's peak power",
        batch,
        CONSTANT_WATTS / 2.0,
        0.03,
    );
}

/// A job's figure covers its whole life, to its last poll (when its last task has ended):
/// at a constant node power (300 W), in `shared` mode from its slurmstepd's process start,
/// two jobs side by side together get the node's energy over the time either ran (within
/// 0.2%) and a job alone the node's over its life (0.1%). In `node` mode a job's figure
/// starts at its plugin's first read, a moment after the process start: never more than
/// its life's, never less than a second of it short. The lives are the extern
/// slurmstepds' (PrologFlags=Contain), watched in /proc.
pub fn whole_lives(cluster: &Cluster, shared: bool) {
    let sim = cluster.sim(1);
    sim.set(&[ON]);
    // the jobs start over steady power
    cluster.wait_past_power_step(1);
    let watch = StepdWatch::start();
    let job = "#!/bin/sh\n#SBATCH -n1 -c1\nsleep 30\n";
    let (a, b) = (cluster.sbatch(job), cluster.sbatch(job));
    for j in [a, b] {
        cluster.wait_job(j, Duration::from_secs(120));
    }
    let alone = cluster.sbatch(job);
    cluster.wait_job(alone, Duration::from_secs(120));
    sleep(Duration::from_secs(1));
    let life = |j: u32| watch.life(&format!("{j}.extern"));
    let (la, lb, lc) = (life(a), life(b), life(alone));
    drop(watch);
    sim.set(&[OFF]);
    let watts = 300.0;
    // a slurmstepd that runs no task (26.05's extern step) is seen to its exit, a moment
    // after its last poll: 0.2 s of cleanup allowed there
    let (sum_tolerance, alone_tolerance) = if la.had_tasks && lb.had_tasks && lc.had_tasks {
        (0.002, 0.001)
    } else {
        println!("the extern slurmstepds run no task: their lives end at their exits");
        (0.008, 0.008)
    };

    let figure = |j: u32| energy_of(&cluster.energy(j), &j.to_string());
    let mode = if shared { "shared" } else { "node" };
    if shared {
        let union = (la.start + la.secs()).max(lb.start + lb.secs()) - la.start.min(lb.start);
        println!(
            "side by side: {a} lived {:.3} s, {b} {:.3} s, together {union:.3} s",
            la.secs(),
            lb.secs()
        );
        assert_close(
            "shared: two jobs side by side, together",
            figure(a) + figure(b),
            watts * union,
            sum_tolerance,
        );
    } else {
        // a step in node mode counts from its plugin's first read, a fresh sample taken a
        // few hundred milliseconds after its process started (the plugin loads then)
        for (j, l) in [(a, la), (b, lb), (alone, lc)] {
            let measured = figure(j);
            println!(
                "node: job {j}: measured {measured} J, {:.1} J over its life, {:.3} s of it \
                 before its plugin's first read",
                watts * l.secs(),
                (watts * l.secs() - measured) / watts
            );
            assert!(
                measured <= watts * l.secs() * 1.001 + 1.0 && measured >= watts * (l.secs() - 1.0),
                "node: job {j}: {measured} J for {:.1} J over its life",
                watts * l.secs()
            );
        }
        return;
    }
    println!("alone: {alone} lived {:.3} s", lc.secs());
    assert_close(
        &format!("{mode}: a job alone"),
        figure(alone),
        watts * lc.secs(),
        alone_tolerance,
    );
}

/// The cluster [`whole_lives`] runs on: one node at [`IDLE_WATTS`]' static power,
/// `EnergyAttribution=shared` or `node`, Slurm's cgroup v1 plugins, PrologFlags=Contain.
pub fn whole_life_cluster(root: &std::path::Path, shared: bool) -> Cluster {
    let mode = if shared { "shared" } else { "node" };
    Cluster::up(
        root,
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyAttribution={mode}\n\
                 EnergyAttributionIdleWatts={IDLE_WATTS}\n"
            ),
            sim_args: vec![Some(SIM)],
            cgroups: Cgroups::V1,
            ..ClusterSpec::default()
        },
    )
}
