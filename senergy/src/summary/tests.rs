//! The summary's lines against figures computed by hand from the same inputs.

use super::*;
use crate::record::JobRow;
use crate::report::job_report;
use crate::scopes::Factor;

/// 2026-11-22T13:00:00Z.
const T0: i64 = 1_795_352_400;

fn fixed(value: f64) -> Factor {
    Factor {
        value: Some(value),
        ..Factor::default()
    }
}

/// 200 gCO2e/kWh location-based, 50 market-based, PUE 1.5, 0.25 EUR/kWh.
fn tariff() -> Tariff {
    let mut t = Tariff::new(None, None, Some(0.25), Some("EUR".into()))
        .and_then(|t| t.with_market(fixed(50.0)))
        .and_then(|t| t.with_pue(fixed(1.5)))
        .expect("valid factors");
    t.location = fixed(200.0);
    t
}

/// A job of `joules` (`None`: none recorded) on n1 over an hour.
fn row(job_id: u32, joules: Option<u64>) -> JobRow {
    JobRow {
        job_id,
        name: "sim".into(),
        state: slurm_sys::job_states::JOB_COMPLETE,
        start: T0,
        end: T0 + 3600,
        elapsed_s: 3600,
        alloc_nodes: 1,
        nodes: "n1".into(),
        tres_alloc: match joules {
            Some(j) => format!("1=2,3={j}"),
            None => "1=2".into(),
        },
        ..JobRow::default()
    }
}

fn reports(rows: &[JobRow]) -> Vec<JobReport> {
    rows.iter()
        .map(|r| job_report(r, &tariff(), T0 + 86_400, None))
        .collect()
}

/// Every line, each figure by hand: 2 kWh of IT energy, 3 kWh at the facility (PUE 1.5),
/// 600 g location-based, 150 g market-based, 0.50 EUR (the price is the IT energy's).
#[test]
fn a_job_alone_gives_its_energy_each_scope_and_its_cost() {
    let text = text(&reports(&[row(77, Some(7_200_000))]), &tariff());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "Job 77 (sim) COMPLETED, 1 node n1, 01:00:00",
            "  energy: 2.000000 kWh (7200000 J)",
            "  scope 2, location-based: 600.00 gCO2e",
            "  scope 2, market-based: 150.00 gCO2e",
            "  cost: 0.5000 EUR",
        ],
        "{text}"
    );
    // no node kept the job's parts or idle-held figures: not recorded, never 0
    assert_eq!(
        lines[5..7],
        ["  parts: not recorded", "  idle-held: not recorded"]
    );
    assert!(lines[7].starts_with("factors: "), "{text}");
    assert!(lines[7].contains("PUE 1.5"), "{text}");
}

/// No energy recorded: every figure says so; nothing reads as 0.
#[test]
fn a_figure_accounting_lacks_is_not_recorded_never_0() {
    let text = text(&reports(&[row(78, None)]), &tariff());
    for what in [
        "energy",
        "scope 2, location-based",
        "scope 2, market-based",
        "cost",
    ] {
        assert!(
            text.contains(&format!("  {what}: not recorded\n")),
            "{what}: {text}"
        );
    }
    assert!(!text.contains(" 0.00"), "{text}");
    // without factors or a price: says what is missing, not 0
    let bare = Tariff::default();
    let text = super::text(&reports(&[row(78, Some(3_600_000))]), &bare);
    assert!(
        text.contains("  emissions: no carbon intensity configured\n"),
        "{text}"
    );
    assert!(text.contains("  cost: no price configured\n"), "{text}");
}

/// An array's elements under one total (the one with no figure named beside it), each
/// listed with its own.
#[test]
fn an_array_is_rolled_up_with_its_elements_listed() {
    let element = |task: u32, job_id: u32, joules: Option<u64>| JobRow {
        array: Some((500, task)),
        ..row(job_id, joules)
    };
    let rows = [
        element(1, 501, Some(3_600_000)),
        element(2, 502, None),
        element(3, 500, Some(7_200_000)),
    ];
    let text = text(&reports(&rows), &tariff());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Job array 500 (sim): 3 elements", "{text}");
    assert_eq!(
        lines[1], "  energy: 3.000000 kWh (10800000 J) (not recorded for 500_2)",
        "{text}"
    );
    // 3 kWh x 1.5 x 200 g
    assert_eq!(
        lines[2], "  scope 2, location-based: 900.00 gCO2e (not recorded for 500_2)",
        "{text}"
    );
    assert_eq!(
        lines[4], "  cost: 0.7500 EUR (not recorded for 500_2)",
        "{text}"
    );
    assert_eq!(
        lines[7],
        "  500_1: (sim) COMPLETED, 1 node n1, 01:00:00; energy 1.000000 kWh (3600000 J), \
         scope 2, location-based 300.00 gCO2e, scope 2, market-based 75.00 gCO2e, \
         cost 0.2500 EUR",
        "{text}"
    );
    assert!(lines[8].starts_with("  500_2: ") && lines[8].contains("energy not recorded"));
    assert!(lines[9].starts_with("  500_3: "), "{text}");
}

/// A heterogeneous job's components under their leader's id, summed.
#[test]
fn a_heterogeneous_job_is_rolled_up_with_its_components() {
    let component = |offset: u32, joules: u64| JobRow {
        het: Some((900, offset)),
        ..row(900 + offset, Some(joules))
    };
    let rows = [
        component(0, 1_800_000),
        component(1, 5_400_000),
        row(950, Some(1)),
    ];
    let text = text(&reports(&rows), &tariff());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "Heterogeneous job 900 (sim): 2 components",
        "{text}"
    );
    assert_eq!(lines[1], "  energy: 2.000000 kWh (7200000 J)", "{text}");
    assert!(lines[7].starts_with("  900+0: "), "{text}");
    assert!(lines[8].starts_with("  900+1: "), "{text}");
    // another job named with it: a summary of its own
    assert!(lines[9].starts_with("Job 950 (sim)"), "{text}");
}

/// A job's name is its owner's text: shown escaped, never sent to the terminal.
#[test]
fn a_name_with_escapes_cannot_forge_lines() {
    let rows = [JobRow {
        name: "x\n  energy: 0 J\x1b[2J".into(),
        ..row(79, None)
    }];
    let text = text(&reports(&rows), &tariff());
    assert!(!text.contains('\x1b'), "{text}");
    assert!(!text.contains("\n  energy: 0 J"), "{text}");
}

/// docs/senergy.md's worked example of a job's parts and idle-held figures: its
/// SystemComment, as the nodes' Epilog kept it, gives the summary the manual shows, line for
/// line (but the factors' stamp): 2 kWh, its second GPU idle for 0.4 kWh (20%), so 20% of
/// each Scope 2 figure: 120 g of 600 location-based, 30 g of 150 market-based.
#[test]
fn the_manuals_parts_and_idle_held_example() {
    let doc = include_str!("../../../docs/senergy.md");
    let comment = crate::scopes::tests::block_after(doc, "<!-- summary example: systemcomment -->");
    let shown = crate::scopes::tests::block_after(doc, "<!-- summary example: summary -->");
    let mut job = row(77, Some(7_200_000));
    job.system_comment = comment.trim().to_string();
    let text = text(&reports(&[job]), &tariff());
    let without_stamp: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("factors: "))
        .collect();
    assert_eq!(without_stamp, shown.lines().collect::<Vec<_>>(), "{text}");
}
