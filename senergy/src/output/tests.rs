use super::columns::text;
use super::*;
use crate::scopes::Scopes;

/// Every field of the JSON is a column of the CSV, with the same value.
#[test]
fn the_csv_carries_the_jsons_fields() {
    use crate::record::{BATCH_STEP, JobRow, StepRow};
    let step = |step_id: u32| StepRow {
        step_id,
        nodes: "n[1-2]".into(),
        nnodes: 2,
        state: 3,
        start: 100,
        end: 160,
        elapsed_s: 60,
        consumed_energy: 1200,
        ..StepRow::default()
    };
    let row = JobRow {
        job_id: 7,
        array: Some((5, 2)),
        het: None,
        name: "sim".into(),
        user: "alice".into(),
        account: "physics".into(),
        state: 3,
        start: 100,
        end: 160,
        elapsed_s: 60,
        alloc_nodes: 2,
        nodes: "n[1-2]".into(),
        tres_alloc: "1=2,3=1200".into(),
        steps: vec![step(BATCH_STEP), step(0)],
        ..JobRow::default()
    };
    let tariff = Tariff::new(Some(300.0), None, Some(0.2), Some("EUR".into())).expect("t");
    let reports = vec![crate::report::job_report(&row, &tariff, 200, None)];
    let json: serde_json::Value =
        serde_json::from_str(&jobs_json(&reports, &tariff)).expect("json");
    let text = jobs_csv(&reports, &tariff);
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    let records: Vec<csv::StringRecord> =
        reader.records().collect::<Result<_, _>>().expect("records");
    assert_eq!(records.len(), 3, "{text}");
    let field = |r: &csv::StringRecord, name: &str| {
        let k = header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{name}"));
        r[k].to_string()
    };
    let job = &json["jobs"][0];
    // the emissions object's fields are columns of their own
    let by_scope = job["emissions"].as_object().expect("emissions").clone();
    assert_eq!(by_scope.len(), 6, "{by_scope:?}");
    for (name, value) in job.as_object().expect("job").iter().chain(&by_scope) {
        // the record kept with the job: columns of its own, below
        if name == "steps" || name == "emissions" || name == "kept" {
            continue;
        }
        let want = match value {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        let got = field(&records[0], name);
        match (want.parse::<f64>(), got.parse::<f64>()) {
            (Ok(a), Ok(b)) => assert!((a - b).abs() < 1e-6, "{name}: {want} vs {got}"),
            _ => assert_eq!(got, want, "{name}"),
        }
    }
    assert_eq!(job["kept"]["recorded"], false);
    assert_eq!(field(&records[0], "kept"), "not recorded");
    assert_eq!(field(&records[0], "kept_j"), "");
    assert_eq!(field(&records[0], "id"), "5_2");
    assert_eq!(field(&records[0], "job_id"), "7");
    assert_eq!(field(&records[2], "step"), "0");
    assert_eq!(field(&records[2], "energy_j"), "1200");
    assert_eq!(field(&records[2], "node_list"), "n[1-2]");
}

/// A text field that begins with `=`, `+`, `-`, `@`, tab or CR gets a leading `'`;
/// any other, and one with such a character further in, stays as it is.
#[test]
fn text_that_would_be_a_formula_gets_a_quote() {
    for (field, want) in [
        ("=1+2", "'=1+2"),
        ("+1", "'+1"),
        ("-1+2", "'-1+2"),
        ("@evil", "'@evil"),
        ("\tjob", "'\tjob"),
        ("\rjob", "'\rjob"),
        ("alice", "alice"),
        ("a-b=c", "a-b=c"),
        ("n[1-2]", "n[1-2]"),
        ("", ""),
    ] {
        assert_eq!(text(field), want, "{field:?}");
    }
}

/// The job owner's text cannot become a formula in `senergy job --csv`, quoted as CSV
/// where it needs to be; numbers, negative ones too, and plain names are untouched.
#[test]
fn jobs_csv_neutralises_formulas_not_numbers() {
    use crate::record::{JobRow, StepRow};
    let row = JobRow {
        job_id: 7,
        name: r#"=HYPERLINK("http://example.com","x")"#.into(),
        user: "@evil".into(),
        account: "-1+2".into(),
        state: 3,
        start: 100,
        end: 160,
        elapsed_s: 60,
        alloc_nodes: 1,
        nodes: "\tn1".into(),
        tres_alloc: "3=600".into(),
        steps: vec![StepRow {
            name: "+sum".into(),
            nodes: "\rn1".into(),
            nnodes: 1,
            state: 3,
            start: 100,
            end: 160,
            elapsed_s: 60,
            consumed_energy: 600,
            ..StepRow::default()
        }],
        ..JobRow::default()
    };
    let tariff = Tariff::new(None, None, None, None).expect("tariff");
    let mut report = crate::report::job_report(&row, &tariff, 200, None);
    // a negative figure in a numeric column must stay a number
    report.avg_watts = Some(-3.5);
    let node = NodeEnergy {
        name: "-n1".into(),
        energy_j: Some(600),
    };
    let step = &mut report.steps[0];
    step.min_node = Some(node.clone());
    step.max_node = Some(node.clone());
    step.node_energy = vec![node];
    let text = jobs_csv(&[report], &tariff);
    let header = "job_id,id,step,array_job_id,array_task_id,name,user,account,state,\
                      running,start,end,elapsed_s,nodes,node_list,energy_j,kwh,avg_watts,\
                      per_node_avg_j,max_watts,min_node,min_node_energy_j,max_node,\
                      max_node_energy_j,node_energy,emissions_g,emissions_method,cost,\
                      currency,data,source,method,avg_watts_bound_pct,facility_energy_j,\
                      scope2_location_g,scope2_market_g,scope3_embodied_g,node_hours,\
                      node_class,factors,het_job_id,het_job_offset,kept,kept_j,kept_parts,\
                      kept_idle_held,kept_tampered_accounting_j,kept_idle_held_scope2_location_g,kept_idle_held_scope2_market_g\n";
    let job = "7,7,,,,\"'=HYPERLINK(\"\"http://example.com\"\",\"\"x\"\")\",'@evil,'-1+2,\
                   COMPLETED,false,100,160,60,1,'\tn1,600,0.000166667,-3.500,600.000,\
                   ,,,,,,,,,,complete,,,1.695,,,,,0.016667,,,,,not recorded,,,,,,\n";
    let step = "7,7,0,,,'+sum,'@evil,'-1+2,COMPLETED,,,,60,1,\"'\rn1\",600,0.000166667,\
                    10.000,600.000,,'-n1,600,'-n1,600,'-n1:600,,,,,complete,,,1.695,,,,,0.016667,,,,,,,,,,,\n";
    assert_eq!(text, format!("{header}{job}{step}"));
}

/// No job (all those asked for unknown): the header alone, the one the lines have.
#[test]
fn jobs_csv_without_jobs_is_its_header() {
    let tariff = Tariff::new(None, None, None, None).expect("tariff");
    assert_eq!(
        jobs_csv(&[], &tariff),
        "job_id,id,step,array_job_id,array_task_id,name,user,account,state,running,start,\
             end,elapsed_s,nodes,node_list,energy_j,kwh,avg_watts,per_node_avg_j,max_watts,\
             min_node,min_node_energy_j,max_node,max_node_energy_j,node_energy,emissions_g,\
             emissions_method,cost,currency,data,source,method,avg_watts_bound_pct,\
             facility_energy_j,scope2_location_g,scope2_market_g,scope3_embodied_g,\
             node_hours,node_class,factors,het_job_id,het_job_offset,kept,kept_j,kept_parts,\
             kept_idle_held,kept_tampered_accounting_j,kept_idle_held_scope2_location_g,kept_idle_held_scope2_market_g\n"
    );
}

/// `senergy usage --csv`: an account or user that would be a formula gets a quote; the
/// figures, a negative cost too, do not.
#[test]
fn usage_csv_neutralises_formulas_not_numbers() {
    let row = |account: &str, user: &str| UsageRow {
        account: account.into(),
        user: user.into(),
        jobs: 2,
        jobs_incomplete: 0,
        energy_j: 3_600_000,
        kwh: 1.0,
        emissions_g: Some(-3.5),
        cost: Some(-0.5),
        emissions: Scopes::default(),
        ..UsageRow::default()
    };
    let usage = Usage {
        start: 0,
        end: 100,
        rows: vec![row("@evil", "\tbob"), row("physics", "alice")],
        total: row("", ""),
    };
    let tariff = Tariff::new(None, None, None, Some("EUR".into())).expect("tariff");
    assert_eq!(
        usage_csv(&usage, &tariff),
        "account,user,jobs,jobs_incomplete,energy_j,kwh,emissions_g,cost,currency,\
             facility_energy_j,scope2_location_g,scope2_market_g,scope3_embodied_g,\
             node_hours,node_class,factors,idle_held,idle_held_share_pct,\
             jobs_idle_held_recorded,idle_held_scope2_location_g,idle_held_scope2_market_g,\
             jobs_tampered,tampered_accounting_j\n\
             '@evil,'\tbob,2,0,3600000,1.000000000,-3.500000,-0.500000,EUR,,,,,,,,,,0,,,0,0\n\
             physics,alice,2,0,3600000,1.000000000,-3.500000,-0.500000,EUR,,,,,,,,,,0,,,0,0\n\
             (all),(all),2,0,3600000,1.000000000,-3.500000,-0.500000,EUR,,,,,,,,,,0,,,0,0\n"
    );
}

/// A job of two steps as accounting records them, in whole seconds: an 18.85 s step at
/// 540 W recorded as 18 s, and a 1000.85 s one at 540 W recorded as 1000 s.
pub(super) fn a_short_and_a_long_step() -> JobReport {
    use crate::record::{JobRow, StepRow};
    let step = |step_id: u32, elapsed_s: u64, joules: u64| StepRow {
        step_id,
        nodes: "n1".into(),
        nnodes: 1,
        state: 3,
        start: 100,
        end: 100 + elapsed_s as i64,
        elapsed_s,
        consumed_energy: joules,
        ..StepRow::default()
    };
    let row = JobRow {
        job_id: 7,
        state: 3,
        start: 100,
        end: 1118,
        elapsed_s: 1018,
        alloc_nodes: 1,
        nodes: "n1".into(),
        tres_alloc: "3=550638".into(),
        // 540 W × 18.85 s and 540 W × 1000.85 s
        steps: vec![step(0, 18, 10_179), step(1, 1000, 540_459)],
        ..JobRow::default()
    };
    crate::report::job_report(&row, &Tariff::default(), 2000, None)
}

/// The text marks an average power off by more than 1% with `~` (the 18 s step's 565.5 W
/// for its true 540 W), not one of 1000 s, and keeps the columns where they were.
#[test]
fn the_table_marks_an_approximate_average_power() {
    let table = jobs_table(&[a_short_and_a_long_step()], &Tariff::default());
    let line = |step: &str| {
        table
            .lines()
            .find(|l| l.trim_start().starts_with(step))
            .unwrap_or_else(|| panic!("step {step} in {table}"))
            .to_string()
    };
    let (header, short, long) = (line("STEP"), line("0 "), line("1 "));
    assert!(short.contains(" ~565.5 "), "{table}");
    assert!(long.contains(" 540.5 ") && !long.contains('~'), "{table}");
    // AVG_W's column still ends where its header does
    let end = header.find("AVG_W").expect("AVG_W") + "AVG_W".len();
    assert_eq!(&short[end - 6..end], "~565.5", "{table}");
    assert_eq!(&long[end - 5..end], "540.5", "{table}");
}

#[test]
fn durations_like_sacct() {
    assert_eq!(duration(62), "00:01:02");
    assert_eq!(duration(90_061), "1-01:01:01");
}

/// A job owner's text reaches the terminal with its control characters escaped: an escape
/// sequence, a newline that would forge a line, a bidirectional override; plain text and
/// other scripts as they are.
#[test]
fn control_characters_are_shown_escaped() {
    for (name, want) in [
        ("sim-01 é 模拟", "sim-01 é 模拟"),
        ("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07"),
        ("a\nb\rc\td\x7f", "a\\nb\\rc\\td\\x7f"),
        ("csi\u{9b}31m", "csi\\x9b31m"),
        ("txt.\u{202e}exe", "txt.\\u{202e}exe"),
        ("a\\x1b", "a\\\\x1b"),
    ] {
        assert_eq!(shown(name), want, "{name:?}");
    }
}

/// `senergy job` and `senergy usage`: names, users, accounts and node names are shown
/// escaped, one line per line of the table.
#[test]
fn the_tables_send_no_control_character() {
    use crate::record::{JobRow, StepRow};
    let row = JobRow {
        job_id: 7,
        name: "\x1b]0;pwned\x07sim\nJob 8 (forged)".into(),
        user: "al\x1bice".into(),
        account: "phys\rics".into(),
        state: 3,
        start: 100,
        end: 160,
        elapsed_s: 60,
        alloc_nodes: 1,
        nodes: "n\x1b1".into(),
        tres_alloc: "3=600".into(),
        steps: vec![StepRow {
            name: "step\x1b[1A".into(),
            nodes: "n1".into(),
            nnodes: 1,
            state: 3,
            start: 100,
            end: 160,
            elapsed_s: 60,
            consumed_energy: 600,
            ..StepRow::default()
        }],
        ..JobRow::default()
    };
    let tariff = Tariff::new(None, None, None, None).expect("tariff");
    let mut report = crate::report::job_report(&row, &tariff, 200, None);
    report.measured("rapl\x1b".into(), "node\t".into());
    let node = |name: &str| NodeEnergy {
        name: name.into(),
        energy_j: Some(300),
    };
    let step = &mut report.steps[0];
    step.min_node = Some(node("n\n1"));
    step.node_energy = vec![node("n\u{202e}1"), node("n2")];
    let table = jobs_table(&[report], &tariff);
    let sent: Vec<char> = table
        .chars()
        .filter(|c| *c != '\n' && (c.is_control() || reorders(*c)))
        .collect();
    assert!(sent.is_empty(), "{sent:?} in {table}");
    assert!(
        table.starts_with(
            "Job 7 (\\x1b]0;pwned\\x07sim\\nJob 8 (forged))  user al\\x1bice  account phys\\rics"
        ),
        "{table}"
    );
    for shown in [
        "n\\x1b1",
        "step\\x1b[1A",
        "n\\n1 300 J",
        "n\\u{202e}1 300 J",
        "rapl\\x1b; node\\t",
    ] {
        assert!(table.contains(shown), "{shown} in {table}");
    }
    assert!(!table.lines().any(|l| l.starts_with("Job 8")), "{table}");
    let usage = Usage {
        start: 0,
        end: 100,
        rows: vec![UsageRow {
            account: "\x1b[31mphysics".into(),
            user: "bob\n".into(),
            jobs: 1,
            jobs_incomplete: 0,
            energy_j: 600,
            kwh: 0.0,
            emissions_g: None,
            cost: None,
            emissions: Scopes::default(),
            ..UsageRow::default()
        }],
        total: UsageRow::default(),
    };
    let table = usage_table(&usage, &tariff);
    assert!(
        !table.chars().any(|c| c != '\n' && c.is_control()),
        "{table}"
    );
    assert!(table.contains("\\x1b[31mphysics  bob\\n "), "{table}");
    // the header, the row, the total; idle-held: its title, the row, the total
    assert_eq!(table.lines().count(), 8, "{table}");
}

/// A small figure keeps three significant digits; a large one its usual decimals.
#[test]
fn a_small_figure_is_never_shown_as_zero() {
    assert_eq!(amount(0.5, 4), "0.5000");
    assert_eq!(amount(0.0000123456, 4), "0.0000123");
    assert_eq!(amount(0.00012, 4), "0.000120");
    assert_eq!(amount(600.0, 2), "600.00");
    assert_eq!(amount(0.0123, 2), "0.0123");
    assert_eq!(amount(0.0, 4), "0.0000");
}

/// A job whose every field of the JSON has a value, and a step whose every one has: array
/// and het ids, by-scope emissions, a cost, what its nodes kept, a step's min and max node.
pub(super) fn every_field() -> (JobReport, Tariff) {
    use crate::kept::Tampered;
    use std::collections::BTreeMap;
    let mut job = a_short_and_a_long_step();
    job.name = "sim".into();
    job.user = "bob".into();
    job.account = "phys".into();
    (job.array_job_id, job.array_task_id) = (Some(5), Some(2));
    (job.het_job_id, job.het_job_offset) = (Some(9), Some(1));
    job.emissions_g = Some(12.5);
    job.emissions_method = Some("hourly");
    job.cost = Some(0.25);
    job.measured("RAPL".into(), "ledger".into());
    job.emissions = Scopes {
        facility_energy_j: Some(123.5),
        scope2_location_g: Some(1.5),
        scope2_market_g: Some(0.25),
        scope3_embodied_g: Some(3.0),
        node_hours: Some(0.28),
        node_class: Some("standard".into()),
    };
    let kept = &mut job.kept;
    kept.recorded = true;
    kept.joules = Some(550_000.5);
    kept.parts = Some(BTreeMap::from([("cpu".to_string(), 1.5)]));
    kept.idle_held = Some(BTreeMap::from([("gpu".to_string(), 0.5)]));
    kept.tampered = Some(Tampered {
        accounting_j: 1,
        recorded_j: 550_000.5,
        lower_bound: false,
    });
    kept.idle_held_scope2_location_g = Some(0.001);
    kept.idle_held_scope2_market_g = Some(0.002);
    let record = crate::kept::NodeRecord {
        joules: 550_000.5,
        source: "rust_rapl".into(),
        parts: kept.parts.clone(),
        idle_held: kept.idle_held.clone(),
    };
    kept.nodes = BTreeMap::from([("n1".to_string(), record)]);
    (kept.nodes_recorded, kept.nodes_with_parts) = (1, 1);
    let node = |name: &str| NodeEnergy {
        name: name.into(),
        energy_j: Some(3),
    };
    let step = &mut job.steps[0];
    step.min_node = Some(node("n1"));
    step.max_node = Some(node("n2"));
    step.node_energy = vec![node("n1"), node("n2")];
    step.max_watts = Some(600);
    step.emissions = job.emissions.clone();
    let tariff = Tariff::new(Some(300.0), None, Some(0.2), Some("EUR".into())).expect("tariff");
    (job, tariff)
}
