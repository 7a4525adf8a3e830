//! Each scope's figure against one computed by hand from the same inputs (within 0.1%).

use std::path::Path;

use super::*;
use crate::record::{BATCH_STEP, JobRow, StepRow};
use crate::report::{JobReport, job_report};
use crate::site::{SiteFile, Tariff};

/// 2026-11-22T13:00:00Z, on the hour.
const T0: i64 = 1_795_352_400;

const KWH: f64 = 3.6e6;

/// Asserts `got` is within 0.1% of `want` (or both 0).
#[track_caller]
fn near(got: Option<f64>, want: f64) {
    let got = got.unwrap_or_else(|| panic!("no figure, want {want}"));
    assert!(
        (got - want).abs() <= want.abs() * 1e-3,
        "{got} is not within 0.1% of {want}"
    );
}

/// A series of `values`, one every `step` seconds from T0.
fn series(step: i64, values: &[f64]) -> Intensities {
    let mut text = String::from("time,value\n");
    for (i, v) in values.iter().enumerate() {
        text.push_str(&format!("{},{v}\n", T0 + step * i as i64));
    }
    Intensities::parse(Path::new("s.csv"), &text).expect("series")
}

fn fixed(value: f64) -> Factor {
    Factor {
        value: Some(value),
        ..Factor::default()
    }
}

fn varying(step: i64, values: &[f64]) -> Factor {
    Factor {
        series: Some(series(step, values)),
        ..Factor::default()
    }
}

/// A tariff of these Scope 2 factors (`None`: not set).
fn tariff(location: Option<Factor>, market: Option<Factor>, pue: Option<Factor>) -> Tariff {
    let base = Tariff::new(None, None, None, None).expect("tariff");
    let mut t = base
        .with_market(market.unwrap_or_default())
        .and_then(|t| t.with_pue(pue.unwrap_or_default()))
        .expect("valid factors");
    t.location = location.unwrap_or_default();
    t
}

/// A job of `joules` on `nodes` (a hostlist of `count`) over `[T0, T0 + seconds)`, with
/// no srun step: its energy is spread evenly over its run.
fn job(joules: u64, nodes: &str, count: u32, seconds: i64) -> JobRow {
    JobRow {
        job_id: 4242,
        user: "alice".into(),
        account: "physics".into(),
        state: slurm_sys::job_states::JOB_COMPLETE,
        start: T0,
        end: T0 + seconds,
        elapsed_s: seconds as u64,
        alloc_nodes: count,
        nodes: nodes.into(),
        tres_alloc: format!("1=2,3={joules}"),
        ..JobRow::default()
    }
}

fn report(row: &JobRow, tariff: &Tariff) -> JobReport {
    job_report(row, tariff, T0 + 86_400, None)
}

#[test]
fn static_factors_apply_to_the_facility_energy() {
    // 1 kWh of IT energy, PUE 1.2: 1.2 kWh at the facility, at 200 and 50 gCO2e/kWh
    let t = tariff(Some(fixed(200.0)), Some(fixed(50.0)), Some(fixed(1.2)));
    let r = report(&job(3_600_000, "n1", 1, 3600), &t);
    near(r.emissions.facility_energy_j, 1.2 * KWH);
    near(r.emissions.scope2_location_g, 240.0);
    near(r.emissions.scope2_market_g, 60.0);
    // the existing field keeps its meaning: the IT energy at the location-based intensity
    near(r.emissions_g, 200.0);
    assert_eq!(
        r.emissions.scope3_embodied_g, None,
        "no node class: no figure"
    );
    near(r.emissions.node_hours, 1.0);
}

#[test]
fn without_a_pue_scope_2_is_on_the_it_energy_and_the_facility_unknown() {
    let t = tariff(Some(fixed(200.0)), Some(fixed(0.0)), None);
    let r = report(&job(3_600_000, "n1", 1, 3600), &t);
    assert_eq!(r.emissions.facility_energy_j, None);
    near(r.emissions.scope2_location_g, 200.0);
    assert_eq!(r.emissions.scope2_market_g, Some(0.0));
    // no market factor: no figure, not 0
    let t = tariff(Some(fixed(200.0)), None, None);
    assert_eq!(
        report(&job(3_600_000, "n1", 1, 3600), &t)
            .emissions
            .scope2_market_g,
        None
    );
}

#[test]
fn a_job_spanning_a_change_of_every_factor_takes_each_at_its_time() {
    // 1 kWh evenly over an hour. Location 100 until T0+1200 then 400; PUE 1.2 until
    // T0+2400 then 1.5; market 0 until T0+1800 then 50.
    let t = tariff(
        Some(varying(1200, &[100.0, 400.0, 400.0])),
        Some(varying(600, &[0.0, 0.0, 0.0, 50.0, 50.0, 50.0])),
        Some(varying(1200, &[1.2, 1.2, 1.5])),
    );
    let r = report(&job(3_600_000, "n1", 1, 3600), &t);
    // thirds of a kWh: facility (1.2 + 1.2 + 1.5) / 3 = 1.3 kWh
    near(r.emissions.facility_energy_j, 1.3 * KWH);
    // location: 1/3 x 1.2 x 100 + 1/3 x 1.2 x 400 + 1/3 x 1.5 x 400 = 40 + 160 + 200
    near(r.emissions.scope2_location_g, 400.0);
    // market: 1/6 x 1.2 x 50 (T0+1800..2400) + 1/3 x 1.5 x 50 = 10 + 25
    near(r.emissions.scope2_market_g, 35.0);
    // the IT energy at the location-based intensity, as before: (100 + 400 + 400) / 3
    near(r.emissions_g, 300.0);
    assert_eq!(
        r.emissions_method,
        Some("series, energy spread evenly over the run")
    );
}

#[test]
fn a_pue_series_alone_changes_the_facility_energy_over_time() {
    // PUE 1.0 for the first half hour, 2.0 for the second; location static 100
    let t = tariff(Some(fixed(100.0)), None, Some(varying(1800, &[1.0, 2.0])));
    let r = report(&job(7_200_000, "n1", 1, 3600), &t);
    near(r.emissions.facility_energy_j, 3.0 * KWH);
    near(r.emissions.scope2_location_g, 300.0);
}

#[test]
fn a_step_has_its_own_scopes_over_its_run() {
    // the job's batch step: 0.5 kWh on n1 over the second half hour, at 300 x PUE 1.1
    let t = tariff(Some(varying(1800, &[100.0, 300.0])), None, Some(fixed(1.1)));
    let mut row = job(3_600_000, "n[1-2]", 2, 3600);
    row.steps = vec![StepRow {
        step_id: BATCH_STEP,
        nodes: "n1".into(),
        nnodes: 1,
        state: slurm_sys::job_states::JOB_COMPLETE,
        start: T0 + 1800,
        end: T0 + 3600,
        elapsed_s: 1800,
        consumed_energy: 1_800_000,
        ..StepRow::default()
    }];
    let r = report(&row, &t);
    let step = &r.steps[0].emissions;
    near(step.facility_energy_j, 0.55 * KWH);
    near(step.scope2_location_g, 0.55 * 300.0);
    near(step.node_hours, 0.5);
}

/// ARCHER2's class: 7,320,000 kgCO2e over 5,860 nodes, 6 years, counted at full use.
fn archer2() -> NodeClassEntry {
    NodeClassEntry {
        name: "standard".into(),
        nodes: Some("nid[001000-006859]".into()),
        embodied_kgco2e: 7_320_000.0 / 5_860.0,
        lifetime_years: 6.0,
        utilisation: 1.0,
        ..NodeClassEntry::default()
    }
}

#[test]
fn archer2s_inputs_give_its_published_figure_per_node_hour() {
    let class = NodeClass::new(archer2()).expect("valid");
    // 7,320,000 / (5,860 x 6 x 8,760) = 0.023766 kgCO2e per node-hour: ARCHER2 publishes
    // 0.023 (archer2.ac.uk/news/2024/11/28/emissions.html)
    near(Some(class.kg_per_node_hour()), 0.023_766_1);
    assert!((class.kg_per_node_hour() - 0.023).abs() < 0.001);
}

#[test]
fn embodied_emissions_by_node_name_and_by_feature() {
    let std = NodeClass::new(NodeClassEntry {
        name: "std".into(),
        nodes: Some("n[1-4]".into()),
        embodied_kgco2e: 1000.0,
        lifetime_years: 5.0,
        utilisation: 0.8,
        ..NodeClassEntry::default()
    })
    .expect("valid");
    let gpu = NodeClass::new(NodeClassEntry {
        name: "gpu".into(),
        features: vec!["a100".into()],
        embodied_kgco2e: 4000.0,
        lifetime_years: 4.0,
        utilisation: 0.5,
        ..NodeClassEntry::default()
    })
    .expect("valid");
    // 1000 / (5 x 8760 x 0.8) = 0.0285388 kg per node-hour; 4000 / (4 x 8760 x 0.5) =
    // 0.2283105
    near(Some(std.kg_per_node_hour()), 0.028_538_8);
    near(Some(gpu.kg_per_node_hour()), 0.228_310_5);
    let mut t = tariff(None, None, None);
    t.classes = vec![std, gpu];
    t.node_features =
        node_features("NodeName=DEFAULT Features=a100\nNodeName=g[1-2] CPUs=64 # GPUs\n");
    // by name: two nodes for an hour
    let r = report(&job(0, "n[1-2]", 2, 3600), &t);
    near(r.emissions.scope3_embodied_g, 2.0 * 28.538_8);
    assert_eq!(r.emissions.node_class.as_deref(), Some("std"));
    // one of each for half an hour: 0.5 x 28.5388 + 0.5 x 228.3105
    let r = report(&job(0, "n1,g1", 2, 1800), &t);
    near(r.emissions.scope3_embodied_g, 14.269_4 + 114.155_3);
    assert_eq!(r.emissions.node_class.as_deref(), Some("std,gpu"));
    // a node of no class: no figure, never 0
    let r = report(&job(0, "x1", 1, 3600), &t);
    assert_eq!(r.emissions.scope3_embodied_g, None);
}

#[test]
fn slurm_conf_features_follow_defaults_continuations_and_comments() {
    let conf = "# nodes\n\
                nodename=DEFAULT Feature=cpu,zen4\n\
                NodeName=c[1-2] CPUs=8\n\
                NodeName=g1 \\\n  Features=\"gpu,a100\" # GPU node\n\
                PartitionName=p Nodes=ALL Default=YES\n";
    let f = node_features(conf);
    let names = |n: &str| f.get(n).map(|s| s.iter().cloned().collect::<Vec<_>>());
    assert_eq!(names("c2"), Some(vec!["cpu".into(), "zen4".into()]));
    assert_eq!(names("g1"), Some(vec!["a100".into(), "gpu".into()]));
    assert_eq!(f.len(), 3);
}

#[test]
fn bad_factors_are_refused_naming_the_key() {
    let bad = |f: fn(&mut NodeClassEntry)| {
        let mut e = archer2();
        f(&mut e);
        NodeClass::new(e).expect_err("refused")
    };
    assert!(bad(|e| e.utilisation = 0.0).contains("utilisation = 0"));
    assert!(bad(|e| e.utilisation = 1.5).contains("utilisation"));
    assert!(bad(|e| e.lifetime_years = f64::NAN).contains("lifetime_years"));
    assert!(bad(|e| e.embodied_kgco2e = -1.0).contains("embodied_kgco2e"));
    assert!(bad(|e| e.nodes = None).contains("neither nodes nor features"));
    assert!(bad(|e| e.nodes = Some("n[1-".into())).contains("nodes"));
    let base = || Tariff::new(None, None, None, None).expect("tariff");
    assert!(base().with_pue(fixed(0.9)).is_err());
    assert!(base().with_pue(varying(600, &[1.2, 11.0])).is_err());
    assert!(base().with_market(fixed(-1.0)).is_err());
    let site = SiteFile::parse(
        Path::new("s.toml"),
        "[[node_class]]\nname = \"x\"\nnodez = \"n1\"\n",
    );
    assert!(site.is_err_and(|e| e.to_string().contains("nodez")));
}

#[test]
fn the_stamp_names_the_site_file_its_version_and_each_origin() {
    let mut t = tariff(None, Some(fixed(0.0)), Some(fixed(1.25)));
    t.location = Factor {
        value: Some(250.0),
        origin: Origin {
            value_from: Some("--carbon-intensity"),
            ..Origin::default()
        },
        ..Factor::default()
    };
    t.market.origin.value_from = Some("site file");
    t.pue.origin.value_from = Some("site file");
    t.stamp = Stamp {
        site_file: Some("/etc/slurm/senergy.conf".into()),
        version: Some("2026-11".into()),
    };
    let text = stamp_text(&t.stamp, t.factors(), &t.classes).expect("stamp");
    assert_eq!(
        text,
        "site file /etc/slurm/senergy.conf version 2026-11; \
         location 250 gCO2e/kWh (--carbon-intensity); market 0 gCO2e/kWh (site file); \
         PUE 1.25 (site file); scope 2 on the facility energy: IT energy x PUE"
    );
    let json = stamp_json(&t.stamp, t.factors(), &t.classes);
    assert_eq!(json["version"], "2026-11");
    assert_eq!(json["pue"]["value"], 1.25);
    assert_eq!(
        json["location_g_per_kwh"]["value_from"],
        "--carbon-intensity"
    );
    // nothing set: no stamp
    let none = Tariff::default();
    assert_eq!(stamp_text(&none.stamp, none.factors(), &none.classes), None);
}

#[test]
fn usage_sums_each_scope_per_user_and_account() {
    let mut t = tariff(Some(fixed(200.0)), Some(fixed(20.0)), Some(fixed(1.5)));
    t.classes = vec![NodeClass::new(archer2()).expect("valid")];
    let mut a = job(3_600_000, "nid001000", 1, 3600);
    let mut b = job(7_200_000, "nid[001000-001001]", 2, 3600);
    a.end = T0 + 3600;
    b.user = "bob".into();
    let jobs = [report(&a, &t), report(&b, &t)];
    let u = crate::usage::usage(&jobs, T0, T0 + 86_400, &t);
    let bob = &u.rows[1].emissions;
    // bob: 2 kWh x 1.5 = 3 kWh at the facility; 2 node-hours
    near(bob.facility_energy_j, 3.0 * KWH);
    near(bob.scope2_location_g, 600.0);
    near(bob.scope2_market_g, 60.0);
    near(bob.scope3_embodied_g, 2.0 * 23.766_1);
    // all: 3 kWh of IT energy, 3 node-hours
    let all = &u.total.emissions;
    near(all.facility_energy_j, 4.5 * KWH);
    near(all.scope2_location_g, 900.0);
    near(all.scope2_market_g, 90.0);
    near(all.scope3_embodied_g, 3.0 * 23.766_1);
    near(all.node_hours, 3.0);
    // without a factor, no figure
    let u = crate::usage::usage(&jobs, T0, T0 + 86_400, &Tariff::default());
    assert_eq!(
        (
            u.total.emissions.scope2_market_g,
            u.total.emissions.scope3_embodied_g
        ),
        (None, None)
    );
}

/// A fenced block of docs/senergy.md: the one after the line `marker`.
pub(crate) fn block_after<'a>(doc: &'a str, marker: &str) -> &'a str {
    let (_, after) = doc
        .split_once(marker)
        .unwrap_or_else(|| panic!("docs/senergy.md has no {marker}"));
    let (_, body) = after
        .split_once("```")
        .and_then(|(_, b)| b.split_once('\n'))
        .expect("a block");
    body.split_once("```").expect("a closed block").0
}

/// docs/senergy.md's worked example: its site file and series, read as `senergy job
/// --config` reads them, give the report the manual shows, line for line (but the line of
/// local times), and each figure is the one computed by hand there.
#[test]
fn the_manuals_worked_example() {
    let doc = include_str!("../../../docs/senergy.md");
    let dir = tempfile::tempdir().expect("tempdir");
    let at = dir.path().to_str().expect("utf-8").to_string();
    let site = block_after(doc, "<!-- worked example: senergy.conf -->").replace("/etc/slurm", &at);
    let grid = block_after(doc, "<!-- worked example: grid.csv -->");
    std::fs::write(dir.path().join("senergy.conf"), site).expect("write");
    std::fs::write(dir.path().join("grid.csv"), grid).expect("write");
    let config = format!("{at}/senergy.conf");
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from([
        "senergy", "job", "4242", "--config", &config,
    ])
    .expect("parsed");
    let Some(crate::cli::Command::Job(args)) = &cli.command else {
        panic!("not job")
    };
    let tariff = args.plan().expect("plan").tariff;
    // 2 kWh over an hour on two nodes; its batch step 1 kWh on n1
    let mut row = job(7_200_000, "n[1-2]", 2, 3600);
    row.name = "sim".into();
    row.steps = vec![StepRow {
        step_id: BATCH_STEP,
        name: "batch".into(),
        nodes: "n1".into(),
        nnodes: 1,
        state: slurm_sys::job_states::JOB_COMPLETE,
        start: T0,
        end: T0 + 3600,
        elapsed_s: 3600,
        consumed_energy: 3_600_000,
        ..StepRow::default()
    }];
    let r = report(&row, &tariff);
    let e = &r.emissions;
    // 1 kWh at 200 then 1 kWh at 300: 500 g of IT energy; x PUE 1.25: 625 g
    near(r.emissions_g, 500.0);
    near(e.facility_energy_j, 2.5 * KWH);
    near(e.scope2_location_g, 625.0);
    assert_eq!(e.scope2_market_g, Some(0.0));
    // 2 node-hours x 1249.1468 kg / (6 x 8760 h x 1.0) = 2 x 23.7661 g
    near(e.scope3_embodied_g, 47.532_2);
    let s = &r.steps[0].emissions;
    near(s.facility_energy_j, 1.25 * KWH);
    near(s.scope2_location_g, 312.5);
    near(s.scope3_embodied_g, 23.766_1);
    let table =
        crate::output::jobs_table(std::slice::from_ref(&r), &tariff).replace(&at, "/etc/slurm");
    let shown = block_after(doc, "<!-- worked example: report -->");
    for line in shown.lines().filter(|l| !l.contains("2026-11-22T")) {
        assert!(
            table.lines().any(|l| l == line),
            "{line:?} is not in\n{table}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&crate::output::jobs_json(std::slice::from_ref(&r), &tariff))
            .expect("json");
    let shown: serde_json::Value =
        serde_json::from_str(block_after(doc, "<!-- worked example: json -->")).expect("json");
    assert_eq!(json["jobs"][0]["emissions"], shown["jobs"][0]["emissions"]);
    let factors = json["factors"].to_string().replace(&at, "/etc/slurm");
    assert_eq!(factors, shown["factors"].to_string());
}
