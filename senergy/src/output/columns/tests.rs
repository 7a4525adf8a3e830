use super::*;
use crate::output::tests::every_field;
use crate::output::{ListWriter, Output, columns, jobs_csv, jobs_json, list_cells};

/// The list with every column, in `output`.
fn listed(output: Output, job: &JobReport, tariff: &crate::site::Tariff) -> String {
    let every = columns();
    let mut w = ListWriter::new(output, &every);
    let cells = list_cells(std::slice::from_ref(job), tariff, &every);
    w.begin() + &w.page(&cells) + &w.end()
}

/// Every column is in each form, under its name or heading, in the table's order: the
/// header of `senergy job --csv` and of the list's CSV, the list's table's heading, the
/// list's JSON's columns and each of its jobs' keys.
#[test]
fn every_column_is_in_the_csv_the_table_and_the_json() {
    let (job, tariff) = every_field();
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a name twice: {names:?}");

    let csv = jobs_csv(std::slice::from_ref(&job), &tariff);
    assert_eq!(csv.lines().next(), Some(names.join(",").as_str()));
    let csv = listed(Output::Csv, &job, &tariff);
    assert_eq!(csv.lines().next(), Some(names.join(",").as_str()));

    let table = listed(Output::Table, &job, &tariff);
    let headings: Vec<&str> = table
        .lines()
        .next()
        .expect("a heading")
        .split(' ')
        .collect();
    let headings: Vec<&str> = headings.into_iter().filter(|h| !h.is_empty()).collect();
    let want: Vec<&str> = COLUMNS.iter().map(|c| c.heading).collect();
    assert_eq!(headings, want);
    for c in COLUMNS {
        assert!(
            c.width >= c.heading.len(),
            "{}: its heading is wider",
            c.name
        );
    }

    let json: serde_json::Value =
        serde_json::from_str(&listed(Output::Json, &job, &tariff)).expect("JSON");
    assert_eq!(json["columns"], serde_json::json!(names));
    let keys: Vec<&str> = json["jobs"][0]
        .as_object()
        .expect("a job")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), names.len(), "{keys:?}");
    for name in &names {
        assert!(keys.contains(name), "{name} in the list's JSON");
    }
}

/// Where `senergy job --json` holds the columns named otherwise than the rule of
/// [`in_the_json`] says.
const PLACES: &[(&str, &str)] = &[
    ("step", "/jobs/0/steps/0/step"),
    ("max_watts", "/jobs/0/steps/0/max_watts"),
    ("min_node", "/jobs/0/steps/0/min_node/name"),
    ("min_node_energy_j", "/jobs/0/steps/0/min_node/energy_j"),
    ("max_node", "/jobs/0/steps/0/max_node/name"),
    ("max_node_energy_j", "/jobs/0/steps/0/max_node/energy_j"),
    ("node_energy", "/jobs/0/steps/0/node_energy"),
    ("currency", "/currency"),
    ("factors", "/factors"),
    ("kept", "/jobs/0/kept/recorded"),
    ("kept_j", "/jobs/0/kept/joules"),
    (
        "kept_tampered_accounting_j",
        "/jobs/0/kept/tampered/accounting_j",
    ),
];

/// The fields of `senergy job --json` that no column has: the detail of what the job's
/// nodes kept (docs/senergy.md lists the CSV's `kept` columns). The steps are lines.
const JSON_ONLY: &[&str] = &[
    "/jobs/0/kept/nodes_recorded",
    "/jobs/0/kept/nodes_with_parts",
    "/jobs/0/kept/tampered/recorded_j",
    "/jobs/0/kept/tampered/lower_bound",
    "/jobs/0/kept/nodes",
];

/// A column's place in `senergy job --json`: one of [`PLACES`], else the job's field of its
/// name, its `emissions` object's, or its `kept` object's (`kept_x`: `kept.x`).
fn in_the_json(name: &str, json: &serde_json::Value) -> Option<String> {
    if let Some((_, place)) = PLACES.iter().find(|(n, _)| *n == name) {
        return Some(place.to_string());
    }
    let kept = name
        .strip_prefix("kept_")
        .map(|k| format!("/jobs/0/kept/{k}"));
    [
        Some(format!("/jobs/0/{name}")),
        Some(format!("/jobs/0/emissions/{name}")),
        kept,
    ]
    .into_iter()
    .flatten()
    .find(|place| json.pointer(place).is_some())
}

/// Each leaf of `value` (a field that is not an object, or an empty one) as a JSON pointer
/// under `at`.
fn leaves(at: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    match value.as_object().filter(|fields| !fields.is_empty()) {
        Some(fields) => {
            for (key, field) in fields {
                leaves(&format!("{at}/{key}"), field, out);
            }
        }
        None => out.push(at.to_string()),
    }
}

/// `senergy job --json` and the columns hold the same fields: each column is a field of
/// the job's JSON (of the job, of a step, or of the document), and each field of a job and
/// of a step is a column, but the few [`JSON_ONLY`] ones. A field added to the job's report
/// fails here until it has a column, and so is in the CSV and the list's forms too.
#[test]
fn every_column_is_a_field_of_the_jobs_json_and_every_field_a_column() {
    let (job, tariff) = every_field();
    let json: serde_json::Value =
        serde_json::from_str(&jobs_json(std::slice::from_ref(&job), &tariff)).expect("JSON");
    let places: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let place = in_the_json(c.name, &json);
            place.unwrap_or_else(|| panic!("{} is in no field of the job's JSON", c.name))
        })
        .collect();
    for (c, place) in COLUMNS.iter().zip(&places) {
        let value = json.pointer(place);
        assert!(value.is_some_and(|v| !v.is_null()), "{}: {place}", c.name);
    }
    let mut fields = Vec::new();
    leaves("/jobs/0", &json["jobs"][0], &mut fields);
    fields.retain(|f| f != "/jobs/0/steps");
    for (k, step) in json["jobs"][0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .enumerate()
    {
        let at = format!("/jobs/0/steps/{k}");
        let mut own = Vec::new();
        leaves(&at, step, &mut own);
        // a step's line has the step's own figure in the column of its job's field
        fields.extend(own.into_iter().map(|f| {
            let job_field = f.replacen(&at, "/jobs/0", 1);
            match places.contains(&job_field) {
                true => job_field,
                false => f.replacen(&at, "/jobs/0/steps/0", 1),
            }
        }));
    }
    // a map or a list is one column, and an object that is null holds its columns' fields
    let claimed = |field: &str, place: &str| {
        let under = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
        under(field, place) || under(place, field)
    };
    for field in fields {
        let column = places.iter().any(|p| claimed(&field, p));
        let json_only = JSON_ONLY.iter().any(|p| claimed(&field, p));
        assert!(
            column || json_only,
            "{field} of the job's JSON is no column"
        );
    }
}
