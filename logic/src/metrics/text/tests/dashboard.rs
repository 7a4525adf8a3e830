//! The Grafana dashboard (conf/grafana) against the file [`render`] writes: every query
//! names only series and labels the file has, and the panels that say who ran a job sit
//! in a collapsed row repeated over a variable that has a value only where the file names
//! owners (`EnergyMetricsOwners`), so that a site whose file names none gets no per-user
//! panel to open.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::super::render;
use super::{gpu_ledger, ledger, who};
use crate::attribution::grant::Owner;

const DASHBOARD: &str = include_str!("../../../../../conf/grafana/slurm-energy-dashboard.json");

/// The PromQL functions and keywords the dashboard may use: any other name is a series.
const PROMQL: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "increase",
    "rate",
    "max_over_time",
    "min_over_time",
    "last_over_time",
    "time",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// The keywords whose parenthesis lists labels.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Each series name the file has and its labels.
type Written = BTreeMap<String, BTreeSet<String>>;

/// Each family's labels in the text format `text`.
fn written(text: &str) -> Written {
    let mut families = Written::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, rest) = line.split_once('{').expect("a sample with labels");
        let labels = families.entry(name.to_string()).or_default();
        let inner = rest.rsplit_once('}').expect("labels closed").0;
        for pair in inner.split(',') {
            labels.insert(pair.split_once('=').expect("label=value").0.to_string());
        }
    }
    families
}

/// What a PromQL expression names: series, each with the labels its selector matches on,
/// and the labels of its `by (...)`, `on (...)` and like lists.
#[derive(Debug, Default)]
struct Named {
    series: Vec<(String, Vec<String>)>,
    labels: Vec<String>,
}

/// Reads `expr` as far as this test needs: strings, ranges (`[$__range]`), numbers and
/// Grafana's variables are skipped; an unknown function is a series, and fails.
fn named(expr: &str) -> Named {
    let chars: Vec<char> = expr.chars().collect();
    let mut named = Named::default();
    let mut i = 0;
    let skip_to = |from: usize, end: char| {
        let mut j = from + 1;
        while j < chars.len() && chars[j] != end {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        j + 1
    };
    let ident = |from: usize| {
        let mut j = from;
        while j < chars.len() && (chars[j].is_ascii_alphanumeric() || "_:".contains(chars[j])) {
            j += 1;
        }
        (chars[from..j].iter().collect::<String>(), j)
    };
    // the labels listed in the parenthesis after a keyword of LABEL_LISTS
    let mut in_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_to(i, '"');
        } else if c == '[' {
            i = skip_to(i, ']');
        } else if c == '$' {
            i = ident(i + 1).1;
        } else if c == ')' {
            in_list = false;
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let (name, end) = ident(i);
            i = end;
            if in_list {
                named.labels.push(name);
            } else if LABEL_LISTS.contains(&name.as_str()) {
                in_list = true;
            } else if !PROMQL.contains(&name.as_str()) {
                let mut matchers = Vec::new();
                if chars.get(i) == Some(&'{') {
                    let close = skip_to(i, '}');
                    let mut j = i + 1;
                    while j < close - 1 {
                        if chars[j] == '"' {
                            j = skip_to(j, '"');
                        } else if chars[j].is_ascii_alphabetic() || chars[j] == '_' {
                            let (label, end) = ident(j);
                            matchers.push(label);
                            j = end;
                        } else {
                            j += 1;
                        }
                    }
                    i = close;
                }
                named.series.push((name, matchers));
            }
        } else {
            i += 1;
        }
    }
    named
}

/// Every panel, those in rows included, with the row it is in (if any).
fn panels(dashboard: &Value) -> Vec<(&Value, Option<&Value>)> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push((panel, None));
        for inner in panel["panels"].as_array().into_iter().flatten() {
            all.push((inner, Some(panel)));
        }
    }
    all
}

/// A variable's `label_values(SELECTOR, LABEL)`: the selector and the label.
fn label_values(query: &str) -> (&str, &str) {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .expect("label_values(...)");
    let (selector, label) = inner.rsplit_once(',').expect("selector, label");
    (selector.trim(), label.trim())
}

/// Checks that `named` asks only for what `written` has; `what` says where it is.
fn check(named: &Named, written: &Written, what: &str) {
    assert!(!named.series.is_empty(), "{what}: no series");
    let mut labels = BTreeSet::new();
    for (series, matchers) in &named.series {
        let has = written
            .get(series)
            .unwrap_or_else(|| panic!("{what}: {series} is not in the metrics file"));
        for label in matchers {
            assert!(has.contains(label), "{what}: {series} has no label {label}");
        }
        labels.extend(has.iter().cloned());
    }
    for label in &named.labels {
        assert!(
            labels.contains(label),
            "{what}: no series of it has {label}"
        );
    }
}

/// Every query of the dashboard (panels, legends, variables) names only series and labels
/// that the metrics file has, with owners named; a panel that needs what the file has only
/// with owners is in a collapsed row repeated over a variable whose series the file has
/// only with owners, and no other panel needs it.
#[test]
fn the_dashboards_queries_name_only_what_the_file_has_and_owners_only_where_named() {
    let owners = HashMap::from([(
        7,
        Owner {
            user: "alice".into(),
        },
    )]);
    // a site's file has the idle-held series where the ledger knows them (devices, shared)
    let gpus = written(&render(&gpu_ledger(3), None, &who()));
    let mut with_owners = written(&render(&ledger(3), Some(&owners), &who()));
    let mut without = written(&render(&ledger(3), None, &who()));
    for (series, labels) in gpus {
        with_owners
            .entry(series.clone())
            .or_default()
            .extend(labels.clone());
        without.entry(series).or_default().extend(labels);
    }
    assert!(
        with_owners.contains_key("slurm_energy_job_info"),
        "{with_owners:?}"
    );
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard's JSON");

    // a variable whose series the file has only with owners
    let mut owners_only = BTreeSet::new();
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        let name = var["name"].as_str().expect("a variable's name");
        let (selector, label) = label_values(var["query"]["query"].as_str().expect("query"));
        let mut asks = named(selector);
        if label != "__name__" {
            asks.labels.push(label.to_string());
        }
        check(&asks, &with_owners, &format!("variable {name}"));
        if asks.series.iter().any(|(s, _)| !without.contains_key(s)) {
            owners_only.insert(name);
        }
    }

    let mut per_user = 0;
    for (panel, row) in panels(&dashboard) {
        let title = panel["title"].as_str().expect("a title");
        let mut needs_owners = false;
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let mut asks = named(expr);
            let legend = target["legendFormat"].as_str().unwrap_or_default();
            for label in legend.split("{{").skip(1) {
                asks.labels
                    .push(label.split_once("}}").expect("}}").0.trim().into());
            }
            check(&asks, &with_owners, &format!("panel {title:?}: {expr}"));
            // a series the file lacks without owners, or a label no series has then
            let without_labels: BTreeSet<&String> = without.values().flatten().collect();
            needs_owners |= asks.series.iter().any(|(s, _)| !without.contains_key(s))
                || asks.labels.iter().any(|l| !without_labels.contains(l));
        }
        if !needs_owners {
            continue;
        }
        per_user += 1;
        let row = row.unwrap_or_else(|| panic!("panel {title:?} names owners outside a row"));
        let repeat = row["repeat"].as_str().unwrap_or_default();
        assert!(
            owners_only.contains(repeat),
            "panel {title:?}: its row repeats over {repeat:?}, not a variable that has a \
             value only where the file names owners ({owners_only:?})"
        );
        assert_eq!(row["collapsed"], true, "panel {title:?}: its row is open");
    }
    assert!(per_user >= 1, "no panel by user");
}
