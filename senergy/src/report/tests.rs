use super::*;
use crate::record::BATCH_STEP;
use slurm_sys::job_states;

const NO_VAL64: u64 = 0xffff_ffff_ffff_fffe;

fn step(id: u32, nodes: &str, n: u32, usage: [&str; 6], consumed: u64) -> StepRow {
    let [
        in_max,
        in_max_nodeid,
        in_min,
        in_min_nodeid,
        in_tot,
        out_max,
    ] = usage.map(String::from);
    StepRow {
        step_id: id,
        nodes: nodes.into(),
        nnodes: n,
        state: job_states::JOB_COMPLETE,
        elapsed_s: 60,
        consumed_energy: consumed,
        usage: StepUsage {
            in_max,
            in_max_nodeid,
            in_min,
            in_min_nodeid,
            in_tot,
            out_max,
        },
        ..StepRow::default()
    }
}

/// The 3-node job: n3 most (9712 J), n1 least (5860 J), 517 W peak.
fn three_nodes() -> StepRow {
    step(
        0,
        "n[1-3]",
        3,
        [
            "1=10,3=9712",
            "1=0,3=2",
            "1=1,3=5860",
            "1=2,3=0",
            "1=20,3=23000",
            "3=517",
        ],
        23000,
    )
}

#[test]
fn three_node_step_names_min_max_and_the_middle() {
    let r = step_report(&three_nodes());
    assert_eq!(r.energy_j, Some(23000));
    assert_eq!(
        r.max_node,
        Some(NodeEnergy {
            name: "n3".into(),
            energy_j: Some(9712)
        })
    );
    assert_eq!(r.min_node.as_ref().map(|n| n.name.as_str()), Some("n1"));
    let middle = 23000 - 9712 - 5860;
    let figures: Vec<_> = r
        .node_energy
        .iter()
        .map(|n| (n.name.as_str(), n.energy_j))
        .collect();
    assert_eq!(
        figures,
        [("n1", Some(5860)), ("n2", Some(middle)), ("n3", Some(9712))]
    );
    assert_eq!(r.max_watts, Some(517));
    assert_eq!(r.data, Presence::Complete);
    assert_eq!(r.avg_watts, Some(23000.0 / 60.0));
    assert_eq!(r.per_node_avg_j, Some(23000.0 / 3.0));
    assert_eq!(r.step, "0");
}

#[test]
fn more_than_three_nodes_list_only_min_and_max() {
    let mut s = three_nodes();
    s.nodes = "n[1-4]".into();
    s.nnodes = 4;
    let r = step_report(&s);
    assert!(r.node_energy.is_empty());
    assert_eq!(r.max_node.map(|n| n.name), Some("n3".into()));
}

#[test]
fn a_node_without_energy_makes_the_step_partial() {
    // n2 reported NO_VAL64: it wins the max, and Slurm's step total is NO_VAL64
    let s = step(
        0,
        "n[1-3]",
        3,
        [
            &format!("3={NO_VAL64}"),
            "3=1",
            "3=5860",
            "3=0",
            "3=1",
            "3=4294967294",
        ],
        NO_VAL64,
    );
    let r = step_report(&s);
    assert_eq!(r.data, Presence::Partial);
    assert_eq!(r.energy_j, None);
    assert_eq!(
        r.max_node,
        Some(NodeEnergy {
            name: "n2".into(),
            energy_j: None
        })
    );
    assert_eq!(r.max_watts, None, "NO_VAL watts are no figure");
    assert!(r.node_energy.is_empty());
}

#[test]
fn no_energy_plugin_is_missing_not_zero() {
    let s = step(0, "n1", 1, ["3=0", "3=0", "3=0", "3=0", "3=0", "3=0"], 0);
    let r = step_report(&s);
    assert_eq!(r.data, Presence::Missing);
    assert_eq!(r.energy_j, None);
    assert_eq!(r.avg_watts, None);
    let s = step(0, "n1", 1, ["", "", "", "", "", ""], NO_VAL64);
    assert_eq!(step_report(&s).data, Presence::Missing);
}

/// An 18.85 s step at 540 W, recorded as 18 s (its start and end cut to whole
/// seconds): energy / elapsed is 565.5 W, and the bound it carries holds 540 W.
#[test]
fn a_short_steps_average_power_carries_a_bound_that_holds_the_true_power() {
    let mut s = step(0, "n1", 1, ["", "", "", "", "", ""], 10_179); // 540 W × 18.85 s
    s.elapsed_s = 18;
    let r = step_report(&s);
    let avg = r.avg_watts.expect("an average");
    assert_eq!(avg, 10_179.0 / 18.0);
    let bound = r.avg_watts_bound_pct.expect("a bound");
    assert!(
        (100.0 / 17.0..100.0 / 17.0 + 0.001).contains(&bound),
        "{bound}"
    );
    let (low, high) = (avg * (1.0 - bound / 100.0), avg * (1.0 + bound / 100.0));
    assert!(low <= 540.0 && 540.0 <= high, "{low}..{high}");
}

/// Whatever its start's fraction of a second and its length, a run's true average
/// power (its energy over its true length) lies within the bound of the figure made
/// from the whole seconds accounting records.
#[test]
fn the_bound_holds_the_true_power_wherever_the_seconds_fall() {
    for start in [0.0_f64, 0.01, 0.5, 0.99] {
        for length in [
            1.01_f64, 2.0, 2.99, 5.5, 18.85, 99.99, 100.5, 1000.85, 86_400.3,
        ] {
            let recorded = (start + length).floor() as u64 - start.floor() as u64;
            let joules = (540.0 * length).round() as u64;
            let mut s = step(0, "n1", 1, ["", "", "", "", "", ""], joules);
            s.elapsed_s = recorded;
            let r = step_report(&s);
            let truth = joules as f64 / length;
            match (r.avg_watts, r.avg_watts_bound_pct) {
                (Some(avg), Some(bound)) => {
                    let off = (avg - truth).abs() / avg * 100.0;
                    assert!(off <= bound, "{start}+{length}: {avg} W ±{bound}%, {truth}");
                }
                (None, None) => assert!(recorded <= 1, "{start}+{length}"),
                other => panic!("{start}+{length}: {other:?}"),
            }
        }
    }
}

/// A run recorded as 1 s may have lasted a moment: no average power, not the joules.
#[test]
fn a_run_of_a_second_or_less_has_no_average_power() {
    let mut s = step(0, "n1", 1, ["", "", "", "", "", ""], 540);
    s.elapsed_s = 1;
    let r = step_report(&s);
    assert_eq!(
        (r.energy_j, r.avg_watts, r.avg_watts_bound_pct),
        (Some(540), None, None)
    );
}

/// A 1000 s step's figure is within 0.1% (and a bit, the rounding up).
#[test]
fn a_long_steps_bound_is_small() {
    let mut s = step(0, "n1", 1, ["", "", "", "", "", ""], 540_459);
    s.elapsed_s = 1000;
    let r = step_report(&s);
    assert_eq!(r.avg_watts, Some(540.459));
    assert_eq!(r.avg_watts_bound_pct, Some(0.101));
}

fn job(steps: Vec<StepRow>, tres_alloc: &str, state: u32) -> JobRow {
    JobRow {
        job_id: 42,
        user: "alice".into(),
        account: "a".into(),
        state,
        start: 1_735_689_600,
        end: if state == job_states::JOB_RUNNING {
            0
        } else {
            1_735_689_660
        },
        elapsed_s: 60,
        alloc_nodes: 3,
        nodes: "n[1-3]".into(),
        tres_alloc: tres_alloc.into(),
        steps,
        ..JobRow::default()
    }
}

#[test]
fn job_energy_emissions_and_cost_follow_the_formula() {
    let mut ext = three_nodes();
    ext.step_id = EXTERN_STEP;
    let tariff =
        Tariff::new(Some(350.0), None, Some(0.3), Some("EUR".into())).expect("valid in this test");
    let r = job_report(
        &job(
            vec![ext, three_nodes()],
            "1=3,3=23000,4=3",
            job_states::JOB_COMPLETE,
        ),
        &tariff,
        0,
        None,
    );
    assert_eq!(r.energy_j, Some(23000));
    let kwh = 23000.0 / 3.6e6;
    assert_eq!(r.kwh, Some(kwh));
    assert_eq!(r.emissions_g, Some(kwh * 350.0));
    assert_eq!(r.cost, Some(kwh * 0.3));
    assert_eq!(r.avg_watts, Some(23000.0 / 60.0));
    assert_eq!(r.data, Presence::Complete);
    assert!(!r.running);
    assert_eq!(r.steps[0].step, "extern");
}

#[test]
fn running_job_reports_its_finished_steps_so_far() {
    let mut s0 = three_nodes();
    s0.consumed_energy = 1000;
    s0.usage.in_tot = "3=1000".into();
    let mut s1 = three_nodes();
    s1.step_id = 1;
    s1.consumed_energy = 500;
    let batch = step(BATCH_STEP, "n1", 1, ["", "", "", "", "", ""], NO_VAL64);
    let r = job_report(
        &job(vec![s0, s1, batch], "1=3,4=3", job_states::JOB_RUNNING),
        &Tariff::default(),
        1_735_689_700,
        None,
    );
    assert!(r.running);
    assert_eq!(r.state, "RUNNING");
    assert_eq!(r.energy_j, Some(1500));
    assert_eq!(r.data, Presence::Partial);
    assert_eq!(r.elapsed_s, 100);
    assert_eq!(r.end, None);
}

#[test]
fn job_without_energy_is_missing() {
    let s = step(0, "n1", 1, ["3=0", "3=0", "3=0", "3=0", "3=0", "3=0"], 0);
    let r = job_report(
        &job(vec![s], "1=1,3=0,4=1", job_states::JOB_COMPLETE),
        &Tariff::default(),
        0,
        None,
    );
    assert_eq!(r.data, Presence::Missing);
    assert_eq!(r.energy_j, None);
    assert_eq!(r.kwh, None);
    let tariff = Tariff::new(Some(350.0), None, Some(1.0), None).expect("valid in this test");
    let s = step(0, "n1", 1, ["", "", "", "", "", ""], NO_VAL64);
    let r = job_report(
        &job(vec![s], &format!("3={NO_VAL64}"), job_states::JOB_COMPLETE),
        &tariff,
        0,
        None,
    );
    assert_eq!((r.energy_j, r.emissions_g, r.cost), (None, None, None));
    assert_eq!(r.data, Presence::Missing);
}

#[test]
fn array_elements_are_named_like_sacct() {
    let mut j = job(vec![], "3=5", job_states::JOB_COMPLETE);
    j.array = Some((40, 2));
    let r = job_report(&j, &Tariff::default(), 0, None);
    assert_eq!(r.id, "40_2");
    assert_eq!((r.array_job_id, r.array_task_id), (Some(40), Some(2)));
}

/// At a job's END mail slurmctld has recorded the energy of the steps ended so far; the
/// extern step ends in the job's cleanup and slurmctld records the job's energy again
/// (724 J, then 734 J, on a 22.05 cluster). Only then is the figure final.
#[test]
fn a_job_is_settled_once_its_record_holds_every_steps_energy() {
    let ended = |id: u32, joules: u64, end: i64| StepRow {
        end,
        state: if end > 0 {
            job_states::JOB_COMPLETE
        } else {
            job_states::JOB_RUNNING
        },
        ..step(id, "n1", 1, [""; 6], joules)
    };
    let t = 1_735_689_660;
    let at_end_mail = job(
        vec![ended(BATCH_STEP, 724, t), ended(EXTERN_STEP, 0, 0)],
        "1=1,3=724",
        job_states::JOB_COMPLETE,
    );
    assert!(!settled(&at_end_mail), "the extern step still runs");
    let extern_ended = job(
        vec![ended(BATCH_STEP, 724, t), ended(EXTERN_STEP, 734, t + 1)],
        "1=1,3=724",
        job_states::JOB_COMPLETE,
    );
    assert!(
        !settled(&extern_ended),
        "the job's record lags its extern step"
    );
    let final_record = job(
        vec![ended(BATCH_STEP, 724, t), ended(EXTERN_STEP, 734, t + 1)],
        "1=1,3=734",
        job_states::JOB_COMPLETE,
    );
    assert!(settled(&final_record));
    let running = job(vec![], "1=1", job_states::JOB_RUNNING);
    assert!(!settled(&running));
    let no_energy = job(
        vec![ended(BATCH_STEP, NO_VAL64, t)],
        "1=1",
        job_states::JOB_COMPLETE,
    );
    assert!(
        !settled(&no_energy),
        "waits for a figure, then reports without one"
    );
}
