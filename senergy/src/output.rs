//! The three forms of a report: a readable table, JSON (schema in the README) and CSV.

use std::fmt::Write as _;

use serde::Serialize;

use crate::carbon::Tariff;
use crate::report::{JobReport, NodeEnergy};
use crate::usage::{Usage, UsageRow};

/// Bumped when a field changes meaning or goes away (adding one does not).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct JobsJson<'a> {
    schema_version: u32,
    carbon_intensity: Option<String>,
    currency: &'a str,
    jobs: &'a [JobReport],
}

#[derive(Serialize)]
struct UsageJson<'a> {
    schema_version: u32,
    carbon_intensity: Option<String>,
    currency: &'a str,
    #[serde(flatten)]
    usage: &'a Usage,
}

pub fn jobs_json(jobs: &[JobReport], tariff: &Tariff) -> String {
    let doc = JobsJson {
        schema_version: SCHEMA_VERSION,
        carbon_intensity: tariff.intensity_text(),
        currency: &tariff.currency,
        jobs,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

pub fn usage_json(usage: &Usage, tariff: &Tariff) -> String {
    let doc = UsageJson {
        schema_version: SCHEMA_VERSION,
        carbon_intensity: tariff.intensity_text(),
        currency: &tariff.currency,
        usage,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

fn csv_text(rows: Vec<Vec<String>>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in rows {
        // writing to memory cannot fail
        let _ = w.write_record(&row);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// One row per job (step empty) and one per step.
pub fn jobs_csv(jobs: &[JobReport], tariff: &Tariff) -> String {
    let header = "job_id,step,user,account,state,running,start,end,elapsed_s,nodes,energy_j,kwh,avg_watts,max_watts,min_node,min_node_energy_j,max_node,max_node_energy_j,emissions_g,cost,currency,data";
    let mut rows = vec![header.split(',').map(String::from).collect()];
    let node = |n: &Option<NodeEnergy>| {
        (
            n.as_ref().map(|n| n.name.clone()).unwrap_or_default(),
            opt(n.as_ref().and_then(|n| n.energy_j)),
        )
    };
    for j in jobs {
        rows.push(vec![
            j.id.clone(),
            String::new(),
            j.user.clone(),
            j.account.clone(),
            j.state.into(),
            j.running.to_string(),
            opt(j.start),
            opt(j.end),
            j.elapsed_s.to_string(),
            j.nodes.to_string(),
            opt(j.energy_j),
            fixed(j.kwh, 9),
            fixed(j.avg_watts, 3),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            fixed(j.emissions_g, 6),
            fixed(j.cost, 6),
            tariff.currency.clone(),
            j.data.as_str().into(),
        ]);
        for s in &j.steps {
            let (min, min_j) = node(&s.min_node);
            let (max, max_j) = node(&s.max_node);
            rows.push(vec![
                j.id.clone(),
                s.step.clone(),
                j.user.clone(),
                j.account.clone(),
                s.state.into(),
                String::new(),
                String::new(),
                String::new(),
                s.elapsed_s.to_string(),
                s.nodes.to_string(),
                opt(s.energy_j),
                fixed(
                    s.energy_j.map(|e| e as f64 / crate::carbon::JOULES_PER_KWH),
                    9,
                ),
                fixed(s.avg_watts, 3),
                opt(s.max_watts),
                min,
                min_j,
                max,
                max_j,
                fixed(s.emissions_g, 6),
                String::new(),
                String::new(),
                s.data.as_str().into(),
            ]);
        }
    }
    csv_text(rows)
}

pub fn usage_csv(usage: &Usage, tariff: &Tariff) -> String {
    let header = "account,user,jobs,jobs_incomplete,energy_j,kwh,emissions_g,cost,currency";
    let mut rows = vec![header.split(',').map(String::from).collect()];
    let row = |r: &UsageRow, account: &str, user: &str| {
        vec![
            account.to_string(),
            user.to_string(),
            r.jobs.to_string(),
            r.jobs_incomplete.to_string(),
            r.energy_j.to_string(),
            format!("{:.9}", r.kwh),
            fixed(r.emissions_g, 6),
            fixed(r.cost, 6),
            tariff.currency.clone(),
        ]
    };
    for r in &usage.rows {
        rows.push(row(r, &r.account, &r.user));
    }
    rows.push(row(&usage.total, "(all)", "(all)"));
    csv_text(rows)
}

pub fn local_time(unix: i64) -> String {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_opt(unix, 0)
        .single()
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_else(|| unix.to_string())
}

pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

fn joules(j: Option<u64>) -> String {
    j.map(|j| format!("{j} J")).unwrap_or_else(|| "-".into())
}

fn node_text(n: &Option<NodeEnergy>) -> String {
    match n {
        Some(n) => format!("{} {}", n.name, joules(n.energy_j)),
        None => "-".into(),
    }
}

pub fn jobs_table(jobs: &[JobReport], tariff: &Tariff) -> String {
    let mut t = String::new();
    for j in jobs {
        let when = match (j.start, j.end) {
            (Some(s), Some(e)) => format!("{} - {}", local_time(s), local_time(e)),
            (Some(s), None) => format!("{} - (running)", local_time(s)),
            _ => "(not started)".into(),
        };
        let _ = writeln!(
            t,
            "Job {} {}  user {}  account {}  {}{}",
            j.id,
            if j.name.is_empty() {
                String::new()
            } else {
                format!("({})", j.name)
            },
            j.user,
            j.account,
            j.state,
            if j.running { ", figures so far" } else { "" }
        );
        let _ = writeln!(
            t,
            "  {when}  elapsed {}  {} node(s) {}",
            duration(j.elapsed_s),
            j.nodes,
            j.node_list
        );
        match j.energy_j {
            Some(e) => {
                let _ = writeln!(
                    t,
                    "  energy {e} J = {:.6} kWh  average {}  per node {}  data {}",
                    e as f64 / crate::carbon::JOULES_PER_KWH,
                    j.avg_watts
                        .map(|w| format!("{w:.1} W"))
                        .unwrap_or_else(|| "-".into()),
                    j.per_node_avg_j
                        .map(|w| format!("{w:.0} J"))
                        .unwrap_or_else(|| "-".into()),
                    j.data.as_str()
                );
            }
            None => {
                let _ = writeln!(t, "  energy unknown  data {}", j.data.as_str());
            }
        }
        let mut money = Vec::new();
        if let (Some(g), Some(how)) = (j.emissions_g, tariff.intensity_text()) {
            match j.emissions_method.filter(|_| tariff.series.is_some()) {
                Some(method) => money.push(format!("emissions {g:.2} gCO2e ({how}; {method})")),
                None => money.push(format!("emissions {g:.2} gCO2e ({how})")),
            }
        }
        if let Some(c) = j.cost {
            money.push(
                format!("cost {c:.4} {}", tariff.currency)
                    .trim_end()
                    .to_string(),
            );
        }
        if !money.is_empty() {
            let _ = writeln!(t, "  {}", money.join("  "));
        }
        if !j.steps.is_empty() {
            let _ = writeln!(
                t,
                "  {:<8} {:<10} {:>5} {:>10} {:>12} {:>9} {:>6}  {:<20} {:<20} DATA",
                "STEP",
                "NAME",
                "NODES",
                "ELAPSED",
                "ENERGY_J",
                "AVG_W",
                "MAX_W",
                "MIN_NODE",
                "MAX_NODE",
            );
        }
        for s in &j.steps {
            let _ = writeln!(
                t,
                "  {:<8} {:<10} {:>5} {:>10} {:>12} {:>9} {:>6}  {:<20} {:<20} {}",
                s.step,
                s.name,
                s.nodes,
                duration(s.elapsed_s),
                s.energy_j
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "-".into()),
                fixed(s.avg_watts, 1),
                opt(s.max_watts),
                node_text(&s.min_node),
                node_text(&s.max_node),
                s.data.as_str()
            );
            if s.node_energy.len() > 1 {
                let each: Vec<String> = s
                    .node_energy
                    .iter()
                    .map(|n| format!("{} {}", n.name, joules(n.energy_j)))
                    .collect();
                let _ = writeln!(t, "  {:<19} per node: {}", "", each.join(", "));
            }
        }
        t.push('\n');
    }
    t
}

pub fn usage_table(usage: &Usage, tariff: &Tariff) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Energy of the jobs that ended from {} to {}{}",
        local_time(usage.start),
        local_time(usage.end),
        tariff
            .intensity_text()
            .map(|i| format!(" (carbon intensity: {i})"))
            .unwrap_or_default()
    );
    let cur = if tariff.currency.is_empty() {
        "COST".to_string()
    } else {
        format!("COST_{}", tariff.currency)
    };
    let _ = writeln!(
        t,
        "{:<16} {:<16} {:>6} {:>10} {:>14} {:>12} {:>14} {:>12}",
        "ACCOUNT", "USER", "JOBS", "INCOMPLETE", "ENERGY_J", "KWH", "GCO2E", cur
    );
    let mut line = |r: &UsageRow, account: &str, user: &str| {
        let _ = writeln!(
            t,
            "{:<16} {:<16} {:>6} {:>10} {:>14} {:>12.6} {:>14} {:>12}",
            account,
            user,
            r.jobs,
            r.jobs_incomplete,
            r.energy_j,
            r.kwh,
            fixed(r.emissions_g, 2),
            fixed(r.cost, 4)
        );
    };
    for r in &usage.rows {
        line(r, &r.account, &r.user);
    }
    line(&usage.total, "TOTAL", "");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_like_sacct() {
        assert_eq!(duration(62), "00:01:02");
        assert_eq!(duration(90_061), "1-01:01:01");
    }
}
