//! Power figures in a real cluster are powers the node drew: the static power the shared
//! split learns, CurrentWatts and a step's peak power (TRESUsageOutMax, senergy's MAX_W),
//! against the RAPL simulator's true power, over counters that advance in steps of a few
//! to tens of milliseconds as real ones do. They run beside other tests: the node's power
//! is constant within each check, so a loaded slurmd moves no figure.

use energy_tests as support;

use std::thread::sleep;
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec};
use support::shared_node::{
    RAPL, a_constant_node, current_watts, equal_holdings_pay_alike, wait_for_mark,
};
use support::*;

/// The check of the learned static power: a node drawing 200 W whatever runs, over
/// counters stepping every 2 ms, then every 20 ms (55.7 W was learned over 20 ms steps,
/// and a busy and an idle job of one CPU each were charged 5 135 J and 887 J).
#[test]
fn a_constant_node_is_learned_and_its_jobs_pay_alike_whatever_the_counters_step() {
    let Some(tmp) = root_test_dir(
        "a_constant_node_is_learned_and_its_jobs_pay_alike_whatever_the_counters_step",
    ) else {
        return;
    };
    let cluster = a_constant_node(tmp.path(), 2);
    equal_holdings_pay_alike(&cluster, &[2, 20]);
}

/// A step's peak power (TRESUsageOutMax, senergy's MAX_W) and the node's CurrentWatts are
/// powers the node drew: a 150 W step, then a 300 W step, over counters that advance every
/// 10 ms (each step's and the batch step's peak read 332 W before: a window of a few tens
/// of milliseconds at a step's edge magnified the counter's step).
#[test]
fn a_steps_peak_and_current_watts_are_powers_the_node_drew() {
    let Some(tmp) = root_test_dir("a_steps_peak_and_current_watts_are_powers_the_node_drew") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: "EnergyRaplSource=msr\n",
            sim_args: vec![Some("--vendor amd --packages 1 --cpus 2 --tick-ms 10")],
            node_freq: 1,
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let s = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let step = |name: &str| {
        format!("srun -n1 sh -c '{s} mark {d} {name}_start; sleep 10; {s} mark {d} {name}_end'\n")
    };
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{s} set {d} package0=150\n{}{s} set {d} package0=300\n{}{s} set {d} package0=0\n",
        step("low"),
        step("high")
    ));
    for (name, watts) in [("low", 150.0), ("high", 300.0)] {
        wait_for_mark(&cluster, &format!("{name}_start"));
        sleep(Duration::from_secs(4));
        assert_watts(
            &format!("CurrentWatts at {watts} W"),
            current_watts(&cluster),
            watts,
            0.03,
        );
    }
    cluster.wait_job(job, Duration::from_secs(90));
    let peaks = cluster.peak_watts(job);
    println!("peak powers: {peaks:?}");
    let peak = |id: String| {
        peaks
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, w)| *w)
            .unwrap_or_else(|| panic!("no peak power for {id} in {peaks:?}"))
    };
    assert_watts(
        "the 150 W step's peak",
        peak(format!("{job}.0")),
        150.0,
        0.03,
    );
    assert_watts(
        "the 300 W step's peak",
        peak(format!("{job}.1")),
        300.0,
        0.03,
    );
    assert_watts(
        "the batch step's peak",
        peak(format!("{job}.batch")),
        300.0,
        0.03,
    );
    for (id, watts) in &peaks {
        assert!(
            *watts <= 300.0 * 1.03,
            "{id}'s peak {watts} W is above any power drawn"
        );
    }
}
