//! End to end in a real Slurm cluster on loopback: slurmctld, slurmdbd (MariaDB) and
//! slurmd load the plugin; jobs change the simulated power; sacct, sstat and scontrol are
//! compared with the simulator's true joules.

use energy_tests as support;

use std::thread::sleep;
use std::time::{Duration, Instant};

use support::cluster::{Cluster, ClusterSpec, energy_of, mark, phase_commands};
use support::influxdb::FakeInfluxDb;
use support::*;

const RAPL: &str = "acct_gather_energy/rust_rapl";
/// AMD counters with a 2^-20 J unit wrap every 4096 J: ~15 s at the power set below.
const AMD_FAST_WRAP: &str = "--vendor amd --packages 2 --cpus 2 --esu 20";

fn wait_for_mark(cluster: &Cluster, name: &str, timeout: Duration) -> f64 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(j) = mark(cluster.sim(1), name) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "no mark {name}:\n{}",
            cluster.logs()
        );
        sleep(Duration::from_millis(200));
    }
}

fn scontrol_field(cluster: &Cluster, node: &str, key: &str) -> String {
    let out = cluster.run(&["scontrol", "show", "node", node]);
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
        .to_string()
}

/// The acceptance run: a 40 s job over AMD counters that wrap every ~15 s.
#[test]
fn rust_rapl_job_energy_matches_the_truth_on_wrapping_amd_counters() {
    let Some(tmp) =
        root_test_dir("rust_rapl_job_energy_matches_the_truth_on_wrapping_amd_counters")
    else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\n",
            sim_args: vec![Some(AMD_FAST_WRAP)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let script = format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\nsrun -n1 sh -c '{}'\n",
        phase_commands(
            sim,
            "s0",
            &[
                ("package0=260 package1=280", 14),
                ("package0=150 package1=330", 6)
            ]
        ),
        phase_commands(sim, "s1", &[("package0=300 package1=250", 20)]),
    );
    let job = cluster.sbatch(&script);

    // during the steady 540 W phase: live step energy and node power
    let s0_start = wait_for_mark(&cluster, "s0_start", Duration::from_secs(60));
    sleep(Duration::from_secs(9));
    let before = sim.truth();
    let sstat = cluster.run(&[
        "sstat",
        "-n",
        "-P",
        "-j",
        &format!("{job}.0"),
        "-o",
        "ConsumedEnergyRaw",
    ]);
    let after = sim.truth();
    let live: f64 = sstat
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sstat said {sstat:?}"));
    println!(
        "sstat {live} J, true between {:.1} and {:.1} J",
        before - s0_start,
        after - s0_start
    );
    assert!(
        live >= (before - s0_start) * 0.99 - 1.0 && live <= (after - s0_start) * 1.01 + 1.0,
        "sstat {live} J outside the true {:.1}..{:.1} J",
        before - s0_start,
        after - s0_start
    );
    // the median of three reads a second apart (still in the 540 W phase): a simulator
    // starved on a loaded machine moves energy from one 1 s window to the next (609 W
    // once in a CI-style run), which the next window gives back
    let mut reads: Vec<f64> = (0..3)
        .map(|k| {
            if k > 0 {
                sleep(Duration::from_secs(1));
            }
            scontrol_field(&cluster, "n1", "CurrentWatts")
                .parse()
                .expect("CurrentWatts")
        })
        .collect();
    println!("CurrentWatts {reads:?} W, simulated 540 W");
    reads.sort_by(f64::total_cmp);
    let watts = reads[1];
    assert!(
        (watts - 540.0).abs() <= 540.0 * 0.02,
        "CurrentWatts {watts} (the median of {reads:?}) vs 540 W"
    );

    cluster.wait_job(job, Duration::from_secs(120));
    let rows = cluster.energy(job);
    let at = |name: &str| mark(sim, name).unwrap_or_else(|| panic!("no mark {name}"));
    let steps = [
        (format!("{job}.0"), at("s0_end") - at("s0_start")),
        (format!("{job}.1"), at("s1_end") - at("s1_start")),
        // power is off outside the steps, so these see exactly the steps' energy
        (format!("{job}.batch"), at("s1_end") - at("s0_start")),
        (format!("{job}.extern"), at("s1_end") - at("s0_start")),
        (job.to_string(), at("s1_end") - at("s0_start")),
    ];
    println!(
        "{:<14} {:>12} {:>14} {:>9}",
        "JobID", "sacct J", "true J", "error"
    );
    for (id, truth) in &steps {
        let measured = energy_of(&rows, id);
        println!(
            "{id:<14} {measured:>12.0} {truth:>14.3} {:>8.3}%",
            100.0 * (measured - truth) / truth
        );
    }
    for (id, truth) in &steps {
        assert_close(id, energy_of(&rows, id), *truth, 0.01);
    }
    let ave: f64 = scontrol_field(&cluster, "n1", "AveWatts")
        .parse()
        .expect("AveWatts");
    assert!(ave > 0.0 && ave < 540.0, "AveWatts {ave}");
    // each step's peak is a power the node drew, across the counters' wraps (the demo's
    // first step read 792 W for 610 W over these counters)
    let peaks = cluster.peak_watts(job);
    println!("peak powers: {peaks:?}");
    for (id, top) in [(format!("{job}.0"), 540.0), (format!("{job}.1"), 550.0)] {
        let (_, peak) = peaks
            .iter()
            .find(|(i, _)| *i == id)
            .unwrap_or_else(|| panic!("no peak power for {id} in {peaks:?}"));
        assert_watts(&format!("{id}'s peak"), *peak, top, 0.03);
    }
    for (id, watts) in &peaks {
        assert!(
            *watts <= 550.0 * 1.03,
            "{id}'s peak {watts} W is above any power drawn"
        );
    }
}

fn assert_rows(rows: &[(String, Option<u64>)], expected: &[(String, f64)], relative: f64) {
    println!(
        "{:<14} {:>12} {:>14} {:>9}",
        "JobID", "sacct J", "true J", "error"
    );
    for (id, truth) in expected {
        let measured = energy_of(rows, id);
        println!(
            "{id:<14} {measured:>12.0} {truth:>14.3} {:>8.3}%",
            100.0 * (measured - truth) / truth
        );
    }
    for (id, truth) in expected {
        assert_close(id, energy_of(rows, id), *truth, relative);
    }
}

/// Slurm polls far less often than the counters wrap (AcctGatherNodeFreq=300,
/// JobAcctGatherFrequency=0: a step is polled only when it ends, after several wraps),
/// back-to-back exclusive jobs, a job array, and slurmd restarted in the middle of a job.
#[test]
fn slow_polls_back_to_back_jobs_an_array_and_a_slurmd_restart() {
    let Some(tmp) = root_test_dir("slow_polls_back_to_back_jobs_an_array_and_a_slurmd_restart")
    else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            node_freq: 300,
            jobacct_freq: 0,
            sim_args: vec![Some(AMD_FAST_WRAP)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let batch = |body: String| format!("#!/bin/sh\n#SBATCH --exclusive\n{body}\n");
    let a = cluster.sbatch(&batch(phase_commands(
        sim,
        "a",
        &[
            ("package0=280 package1=260", 16),
            ("package0=200 package1=330", 16),
        ],
    )));
    let b = cluster.sbatch(&batch(phase_commands(
        sim,
        "b",
        &[("package0=310 package1=290", 20)],
    )));
    let array = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --exclusive --array=1-3\n{}\n",
        phase_commands(
            sim,
            "arr${SLURM_ARRAY_TASK_ID}",
            &[("package0=$((100 * SLURM_ARRAY_TASK_ID)) package1=150", 6)]
        )
    ));

    wait_for_mark(&cluster, "a_start", Duration::from_secs(60));
    sleep(Duration::from_secs(10));
    let restart = cluster
        .harness("restart-slurmd")
        .arg("n1")
        .status()
        .expect("restart-slurmd");
    assert!(restart.success(), "slurmd restart failed");

    for job in [a, b] {
        cluster.wait_job(job, Duration::from_secs(180));
    }
    cluster.wait_job(array, Duration::from_secs(180));
    let at = |name: &str| mark(sim, name).unwrap_or_else(|| panic!("no mark {name}"));
    for (job, name) in [(a, "a"), (b, "b")] {
        let truth = at(&format!("{name}_end")) - at(&format!("{name}_start"));
        assert_rows(
            &cluster.energy(job),
            &[
                (job.to_string(), truth),
                (format!("{job}.batch"), truth),
                (format!("{job}.extern"), truth),
            ],
            0.01,
        );
    }
    let rows = cluster.energy(array);
    let expected: Vec<(String, f64)> = (1..=3)
        .map(|k| {
            (
                format!("{array}_{k}"),
                at(&format!("arr{k}_end")) - at(&format!("arr{k}_start")),
            )
        })
        .collect();
    assert_rows(&rows, &expected, 0.01);
}

/// A package counter reads a wrong constant, 1000 J behind its true count, for 3 s in the
/// middle of a 40 s job (as a torn or corrupted read does), then its true count again: on
/// AMD counters (wrapping every ~18 s) over MSRs and on Intel server counters with DRAM
/// over powercap. The bogus value costs nothing: every figure within 0.1% of the truth.
#[test]
fn a_counter_reading_a_wrong_constant_mid_job_costs_nothing() {
    if !root_or_skip("a_counter_reading_a_wrong_constant_mid_job_costs_nothing") {
        return;
    }
    wrong_constant_mid_job(INTEL_SERVER, "sleep 20", "spike package0 3", "sleep 20");
}

/// A 40 s job on one node, on AMD counters over MSRs and on Intel server counters (the
/// layout `intel`) over powercap: its srun step sets the power, runs `before`, makes
/// package0 misbehave with raplsim's `glitch` (its arguments), runs `after`. Every record
/// within 0.1% of the truth, and the bad reads seen in slurmd's log.
fn wrong_constant_mid_job(intel: &str, before: &str, glitch: &str, after: &str) {
    for (layout, source, power) in [
        (AMD_FAST_WRAP, "msr", "package0=230 package1=210"),
        (
            intel,
            "powercap",
            "package0=190 package1=170 dram0=25 dram1=20",
        ),
    ] {
        println!("{layout}, EnergyRaplSource={source}");
        let tmp = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::up(
            tmp.path(),
            &ClusterSpec {
                energy_type: RAPL,
                acct_gather: &format!("EnergyRaplSource={source}\n"),
                sim_args: vec![Some(layout)],
                ..ClusterSpec::default()
            },
        );
        let sim = cluster.sim(1);
        let rs = bin("raplsim").display().to_string();
        let d = sim.dir.display().to_string();
        let job = cluster.sbatch(&format!(
            "#!/bin/sh\nsrun -n1 sh -c '{rs} mark {d} s_start; {rs} set {d} {power}; {before}; \
             {rs} glitch {d} {glitch}; {after}; {rs} set {d} all=0; {rs} mark {d} s_end'\n"
        ));
        cluster.wait_job(job, Duration::from_secs(120));
        let truth =
            mark(sim, "s_end").expect("end mark") - mark(sim, "s_start").expect("start mark");
        // power is off outside the step, so every record sees exactly the step's energy
        assert_every_record(&cluster, job, truth, 0.001);
        let log = cluster.log("slurmd-n1.log");
        assert!(
            log.contains("continues its last good value")
                || log.contains("behind its last good value"),
            "the bogus read was not seen:\n{}",
            cluster.logs()
        );
    }
}

/// The job's line and its srun, batch and extern steps all within `relative` of `truth`:
/// with power off outside the srun step, every record sees exactly its energy.
fn assert_every_record(cluster: &Cluster, job: u32, truth: f64, relative: f64) {
    assert_rows(
        &cluster.energy(job),
        &[
            (job.to_string(), truth),
            (format!("{job}.0"), truth),
            (format!("{job}.batch"), truth),
            (format!("{job}.extern"), truth),
        ],
        relative,
    );
}

/// `cluster restart-slurmd` of node n1 with `signal`, started again `down_secs` later.
fn restart_slurmd(cluster: &Cluster, signal: &str, down_secs: u32) -> std::process::Child {
    cluster
        .harness("restart-slurmd")
        .args(["n1", signal, &down_secs.to_string()])
        .spawn()
        .expect("restart-slurmd")
}

/// slurmd killed (SIGKILL, as a crash or the OOM killer does) mid-job and started again 3 s
/// later: the ledger it left is continued, the time it was away counted at the last
/// power (steady here), every figure within 1%. The same with the ledger cut short while
/// slurmd is down. Then slurmd killed and kept away while a step ends: the step keeps its
/// figure as of slurmd's last sample and says so in the log, never a bogus figure.
#[test]
fn a_slurmd_killed_mid_job_loses_nothing_and_a_step_ending_without_it_keeps_its_figure() {
    let Some(tmp) = root_test_dir(
        "a_slurmd_killed_mid_job_loses_nothing_and_a_step_ending_without_it_keeps_its_figure",
    ) else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            sim_args: vec![Some(AMD_FAST_WRAP)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let steady = "package0=170 package1=130";
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\n",
        phase_commands(sim, "k", &[(steady, 14)])
    ));
    wait_for_mark(&cluster, "k_start", Duration::from_secs(60));
    sleep(Duration::from_secs(4));
    let status = restart_slurmd(&cluster, "KILL", 3)
        .wait()
        .expect("restart-slurmd");
    assert!(status.success(), "slurmd restart failed");
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = mark(sim, "k_end").expect("end") - mark(sim, "k_start").expect("start");
    assert_every_record(&cluster, job, truth, 0.01);

    // killed again, and its ledger cut short while it is down (a full disk, a torn
    // write): the new slurmd says so and begins a new ledger; each step keeps what it had
    // and goes on from the new ledger, the time between counted at its last power
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\n",
        phase_commands(sim, "t", &[(steady, 16)])
    ));
    wait_for_mark(&cluster, "t_start", Duration::from_secs(60));
    // after the steps' first polls at the set power (every 5 s), which they carry over
    sleep(Duration::from_secs(7));
    let restart = restart_slurmd(&cluster, "KILL", 3);
    sleep(Duration::from_secs(1));
    let ledger = cluster.ledger_path(1);
    let text = std::fs::read(&ledger).expect("the ledger");
    std::fs::write(&ledger, &text[..text.len() / 2]).expect("cut the ledger short");
    let status = restart.wait_with_output().expect("restart-slurmd").status;
    assert!(status.success(), "slurmd restart failed");
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = mark(sim, "t_end").expect("end") - mark(sim, "t_start").expect("start");
    // the time from each step's last read of the old ledger (its polls are 5 s apart) to
    // the new one is estimated at its last power: measured within 0.9%
    assert_every_record(&cluster, job, truth, 0.02);
    let log = cluster.log("slurmd-n1.log");
    for said in [
        "is not an energy ledger",
        "starting a new energy ledger",
        "slurmd began a new energy ledger: this step keeps",
    ] {
        assert!(log.contains(said), "no {said:?} in slurmd's log:\n{log}");
    }

    // the batch step ends 5 s after slurmd is killed, 15 s before it is back
    let rs = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{rs} mark {d} g_start\n{rs} set {d} {steady}\nsleep 7\n{rs} set {d} all=0\n\
         {rs} mark {d} g_end\n"
    ));
    let start = wait_for_mark(&cluster, "g_start", Duration::from_secs(60));
    sleep(Duration::from_secs(2));
    let at_kill = sim.truth() - start;
    let restart = restart_slurmd(&cluster, "KILL", 20);
    cluster.wait_job(job, Duration::from_secs(120));
    let status = restart.wait_with_output().expect("restart-slurmd").status;
    assert!(status.success(), "slurmd restart failed");
    let figure = energy_of(&cluster.energy(job), &format!("{job}.batch"));
    let truth = mark(sim, "g_end").expect("end") - start;
    println!(
        "batch step ended without slurmd: {figure} J, {at_kill:.0} J true when slurmd was \
         killed, {truth:.0} J in all"
    );
    // the step takes slurmd's last sample, at most a second before the kill, which comes a
    // moment after the test asks for it (the node's supervisor polls every 0.1 s, under
    // load later)
    assert!(
        figure >= at_kill - 300.0 - 1.0 && figure <= at_kill + 2.0 * 300.0 + 1.0,
        "{figure} J for {at_kill:.0} J when slurmd was killed"
    );
    let log = cluster.log("slurmd-n1.log");
    assert!(
        log.contains("slurmd did not answer this step's request for a fresh energy ledger"),
        "the step's figure as of slurmd's last sample is not logged:\n{log}"
    );
}

/// A 15 s job requeued 6 s into its run (`scontrol requeue`) runs again whole under its id, on the same
/// node: the second run's records are the node's energy over that run alone, not both
/// runs'. Then slurmd is killed mid-job while the power doubles, and started again 8 s
/// later: the time it was away is the counters' own rise (Intel server counters: a wrap
/// takes over 4 min at their maximum power), every figure within 0.5%. In both modes.
#[test]
fn a_requeued_job_begins_anew_and_a_slurmd_away_while_the_power_doubles_loses_nothing() {
    let Some(tmp) = root_test_dir(
        "a_requeued_job_begins_anew_and_a_slurmd_away_while_the_power_doubles_loses_nothing",
    ) else {
        return;
    };
    for mode in ["shared", "node"] {
        println!("EnergyAttribution={mode}");
        let cluster = Cluster::up(
            &tmp.path().join(mode),
            &ClusterSpec {
                energy_type: RAPL,
                acct_gather: &format!("EnergyRaplSource=msr\nEnergyAttribution={mode}\n"),
                sim_args: vec![Some(INTEL_SERVER)],
                cgroups: support::cluster::Cgroups::V1,
                // a requeued job runs again 11 s after it left, not 121 s
                cred_expire: Some(10),
                ..ClusterSpec::default()
            },
        );
        let sim = cluster.sim(1);
        // each run marks its own start and end
        let job = cluster.sbatch(&format!(
            "#!/bin/sh\n#SBATCH --requeue\n{}\n",
            phase_commands(
                sim,
                "q${SLURM_RESTART_COUNT:-0}",
                &[("package0=120 package1=80", 15)]
            )
        ));
        wait_for_mark(&cluster, "q0_start", Duration::from_secs(60));
        sleep(Duration::from_secs(6));
        cluster.run(&["scontrol", "requeue", &job.to_string()]);
        // the killed run leaves its power set: off until the next run sets it
        sim.set(&["all=0"]);
        wait_for_mark(&cluster, "q1_start", Duration::from_secs(180));
        cluster.wait_job(job, Duration::from_secs(120));
        let truth = mark(sim, "q1_end").expect("end") - mark(sim, "q1_start").expect("start");
        println!(
            "both runs (sacct -D):\n{}",
            cluster.run(&[
                "sacct",
                "-D",
                "-n",
                "-P",
                "-j",
                &job.to_string(),
                "-o",
                "JobID,ConsumedEnergyRaw,State,Start,End"
            ])
        );
        assert_rows(
            &cluster.energy(job),
            &[
                (job.to_string(), truth),
                (format!("{job}.batch"), truth),
                (format!("{job}.extern"), truth),
            ],
            0.01,
        );

        let job = cluster.sbatch(&format!(
            "#!/bin/sh\n{}\n",
            phase_commands(
                sim,
                "k",
                &[
                    ("package0=90 package1=60", 8),
                    ("package0=180 package1=120", 17)
                ]
            )
        ));
        wait_for_mark(&cluster, "k_start", Duration::from_secs(60));
        sleep(Duration::from_secs(5));
        // away from 5 s to 13 s; the power doubles at 8 s
        let status = restart_slurmd(&cluster, "KILL", 8)
            .wait()
            .expect("restart-slurmd");
        assert!(status.success(), "slurmd restart failed");
        sleep(Duration::from_secs(5));
        let start = mark(sim, "k_start").expect("start");
        let before = sim.truth() - start;
        let live = cluster.run(&[
            "sstat",
            "-n",
            "-P",
            "-j",
            &format!("{job}.batch"),
            "-o",
            "ConsumedEnergyRaw",
        ]);
        let after = sim.truth() - start;
        println!(
            "sstat 5 s after the restart: {} J, {before:.0} to {after:.0} J true",
            live.trim()
        );
        let live: f64 = live
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("sstat said {live:?}"));
        assert!(
            live >= before * 0.98 && live <= after * 1.02,
            "sstat {live} J for {before:.0} to {after:.0} J"
        );
        cluster.wait_job(job, Duration::from_secs(120));
        let truth = mark(sim, "k_end").expect("end") - start;
        assert_rows(
            &cluster.energy(job),
            &[
                (job.to_string(), truth),
                (format!("{job}.batch"), truth),
                (format!("{job}.extern"), truth),
            ],
            0.005,
        );
        let log = cluster.log("slurmd-n1.log");
        assert!(
            log.contains("bridged by the meter's own counts"),
            "the time away was not bridged:\n{}",
            log.lines()
                .filter(|l| l.contains("energy"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A job alone on a shared node over AMD counters of 2^-20 J (a wrap every 4 096 J: 4.1 s at
/// their 1 000 W bound), slurmd killed 12 s in and back 8 s later while the power doubles
/// (150 W, then 300 W from 14 s): the ledger's gap (about 10 s) is longer than a wrap at
/// the bound, so the counts alone could hold more wraps than their rise says; the powers
/// before and after it leave one number of them, and the gap is the counters' own. Every
/// figure within 1% (issue 53: −8.9%, the gap estimated at the last power, 150 W).
#[test]
fn a_slurmd_away_longer_than_a_counters_wrap_window_is_bridged_by_its_residue() {
    let Some(tmp) =
        root_test_dir("a_slurmd_away_longer_than_a_counters_wrap_window_is_bridged_by_its_residue")
    else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\nEnergyAttribution=shared\n",
            sim_args: vec![Some(AMD_FAST_WRAP)],
            cgroups: support::cluster::Cgroups::V1,
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{}\n",
        phase_commands(
            sim,
            "w",
            &[
                ("package0=90 package1=60", 14),
                ("package0=180 package1=120", 16)
            ]
        )
    ));
    wait_for_mark(&cluster, "w_start", Duration::from_secs(60));
    sleep(Duration::from_secs(12));
    // away from 12 s to 20 s; the power doubles at 14 s
    let status = restart_slurmd(&cluster, "KILL", 8)
        .wait()
        .expect("restart-slurmd");
    assert!(status.success(), "slurmd restart failed");
    cluster.wait_job(job, Duration::from_secs(120));
    let truth = mark(sim, "w_end").expect("end") - mark(sim, "w_start").expect("start");
    let rows = cluster.energy(job);
    let log = cluster.log("slurmd-n1.log");
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("since the energy ledger's last sample"))
        .collect();
    println!("{}", said.join("\n"));
    assert_rows(
        &rows,
        &[
            (job.to_string(), truth),
            (format!("{job}.batch"), truth),
            (format!("{job}.extern"), truth),
        ],
        0.01,
    );
    assert!(
        said.iter()
            .any(|l| l.contains("bridged by the meter's own counts") && l.contains("more wraps")),
        "the gap was not bridged by a number of wraps the powers chose:\n{}",
        said.join("\n")
    );
}

/// A package counter reads a wrong constant 600 J *ahead* of its true count for 1.5 s, from
/// the moment its register wraps: a value just past the wrap, which the counter could have
/// reached from the read before (a burst under the maximum power), not a wrap the reads
/// missed, nor the return from it a reset. AMD counters over MSRs wrap every ~18 s; the
/// Intel server counters over powercap (~23 min at this power) start 18 s short of a wrap.
/// Every figure within 0.1% of the truth.
#[test]
fn a_counter_reading_a_wrong_constant_just_past_a_wrap_costs_nothing() {
    if !root_or_skip("a_counter_reading_a_wrong_constant_just_past_a_wrap_costs_nothing") {
        return;
    }
    // 2^32 units of 2^-14 J, less 18 s of package0's 190 W
    let intel = format!("{INTEL_SERVER} --offset-j {}", (1u64 << 18) - 190 * 18);
    // armed at 10 s, the glitch starts at package0's wrap, ~18 s in
    wrong_constant_mid_job(&intel, "sleep 10", "wrapspike package0 1.5", "sleep 30");
}

/// Three nodes, each in its own network namespace with its own simulated power: the job's
/// energy is the sum of its nodes' true joules.
#[test]
fn three_node_job_energy_is_the_sum_of_its_nodes() {
    let Some(tmp) = root_test_dir("three_node_job_energy_is_the_sum_of_its_nodes") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 3,
            energy_type: RAPL,
            sim_args: vec![Some(AMD_FAST_WRAP); 3],
            ..ClusterSpec::default()
        },
    );
    let rs = bin("raplsim").display().to_string();
    let root = tmp.path().join("sim").display().to_string();
    // each task drives the simulator of the node it runs on, with its own power
    let task = format!(
        "S={root}/$(hostname); P=$((120 + 60 * SLURM_NODEID)); {rs} mark $S start; \
         {rs} set $S package0=$P package1=$((P + 40)); sleep 12; \
         {rs} set $S package0=$((P + 100)) package1=90; sleep 8; {rs} set $S all=0; {rs} mark $S end"
    );
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N3 --exclusive\nsrun -N3 -n3 sh -c '{task}'\n"
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let per_node: Vec<f64> = (1..=3)
        .map(|k| {
            let sim = cluster.sim(k);
            mark(sim, "end").expect("end mark") - mark(sim, "start").expect("start mark")
        })
        .collect();
    println!("true joules per node: {per_node:?}");
    let truth: f64 = per_node.iter().sum();
    assert_rows(
        &cluster.energy(job),
        &[
            (job.to_string(), truth),
            (format!("{job}.0"), truth),
            (format!("{job}.extern"), truth),
        ],
        0.01,
    );
}

/// `--profile=energy` through Slurm's influxdb profile plugin: the step's node power
/// reaches the time-series database every second (JobAcctGatherFrequency energy=1), and
/// each sample is the simulated power, held constant through the step.
#[test]
fn profile_energy_samples_reach_influxdb_with_the_true_power() {
    let Some(tmp) = root_test_dir("profile_energy_samples_reach_influxdb_with_the_true_power")
    else {
        return;
    };
    let influx = FakeInfluxDb::start();
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "ProfileInfluxDBHost={}\nProfileInfluxDBDatabase=energy\n\
                 ProfileInfluxDBRTPolicy=autogen\n",
                influx.url()
            ),
            jobacct_freq: 1,
            extra_conf: "AcctGatherProfileType=acct_gather_profile/influxdb\n",
            sim_args: vec![Some(AMD_FAST_WRAP)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["package0=300", "package1=240"]);
    let job = cluster.sbatch("#!/bin/sh\nsrun -n1 --profile=energy sleep 12\n");
    cluster.wait_job(job, Duration::from_secs(120));
    // "Power,TAGS value=W TIME": the tags are job, step and host, in this order up to 24.11
    // and with task=Energy; sorted and without the task tag from 26.05
    let job_tag = format!("job={job}");
    let ours = |tags: &str| sorted(tags, ',', "task=Energy") == ["host=n1", &job_tag, "step=0"];
    let samples: Vec<(f64, u64)> = influx
        .lines()
        .iter()
        .filter_map(|l| {
            let (series, rest) = l.strip_prefix("Power,")?.split_once(' ')?;
            let (value, time) = rest.strip_prefix("value=")?.split_once(' ')?;
            ours(series).then_some((value.parse().ok()?, time.parse().ok()?))
        })
        .collect();
    println!("{} samples of 540 W: {samples:?}", samples.len());
    // (26.05 orders the query parameters differently)
    let write_to_energy = |request: &str| {
        request
            .strip_prefix("POST /write?")
            .and_then(|r| r.split(' ').next())
            .is_some_and(|query| {
                sorted(query, '&', "") == ["db=energy", "precision=s", "rp=autogen"]
            })
    };
    assert!(
        influx.requests().iter().all(|r| write_to_energy(r)),
        "{:?}",
        influx.requests()
    );
    // the first call of a step has no 1 s window yet and sends nothing
    assert!(
        samples.len() >= 8,
        "{} samples for a 12 s step: {:?}",
        samples.len(),
        influx.lines()
    );
    // each sample is the power over the last >= 1 s window, which the simulator's counter
    // updates (a few ms apart, later under load) make jitter by about 1%; a simulator
    // starved for a few hundred ms moves energy from one window to the next (354 W then
    // 728 W seen in a loaded CI run), never loses or invents it: a sample off by more
    // than 3% must make up with a neighbour
    let close = |watts: f64| (watts - 540.0).abs() <= 540.0 * 0.03;
    for (i, (watts, _)) in samples.iter().enumerate() {
        let made_up = [i.checked_sub(1), Some(i + 1)]
            .into_iter()
            .flatten()
            .filter_map(|j| samples.get(j))
            .any(|(other, _)| close((watts + other) / 2.0));
        assert!(close(*watts) || made_up, "{watts} W: {samples:?}");
    }
    let mean = samples.iter().map(|(w, _)| w).sum::<f64>() / samples.len() as f64;
    println!("mean of the samples {mean:.2} W, simulated 540 W");
    assert!(
        (mean - 540.0).abs() <= 540.0 * 0.005,
        "mean {mean} W: {samples:?}"
    );
    assert!(samples.windows(2).all(|w| w[0].1 <= w[1].1), "{samples:?}");
}

/// The `sep`-separated items of `list` but `except`, sorted.
fn sorted<'a>(list: &'a str, sep: char, except: &str) -> Vec<&'a str> {
    let mut items: Vec<&str> = list.split(sep).filter(|i| *i != except).collect();
    items.sort_unstable();
    items
}

/// Slurm's own rapl plugin on the same kind of scenario, as the baseline it is measured
/// against (Intel counters, which it can read; its DRAM figures use the package unit).
/// Printed, not asserted.
#[test]
fn baseline_slurm_c_rapl_plugin_on_the_same_scenario() {
    if !root_or_skip("baseline_slurm_c_rapl_plugin_on_the_same_scenario") {
        return;
    }
    for energy_type in [RAPL, "acct_gather_energy/rapl"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::up(
            tmp.path(),
            &ClusterSpec {
                energy_type,
                sim_args: vec![Some(INTEL_SERVER)],
                ..ClusterSpec::default()
            },
        );
        let sim = cluster.sim(1);
        let job = cluster.sbatch(&format!(
            "#!/bin/sh\nsrun -n1 sh -c '{}'\n",
            phase_commands(
                sim,
                "s",
                &[
                    ("package0=180 package1=160 dram0=20 dram1=25", 10),
                    ("package0=90 package1=250 dram0=35 dram1=10", 10)
                ]
            )
        ));
        cluster.wait_job(job, Duration::from_secs(120));
        let truth = mark(sim, "s_end").expect("end") - mark(sim, "s_start").expect("start");
        let rows = cluster.energy(job);
        let measured = energy_of(&rows, &format!("{job}.0"));
        println!(
            "baseline {energy_type}: step {measured} J for {truth:.1} J true: error {:+.2}%",
            100.0 * (measured - truth) / truth
        );
        if energy_type == RAPL {
            assert_close("rust_rapl step", measured, truth, 0.01);
        }
    }
}
