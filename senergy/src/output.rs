//! The three forms of a report: a readable table, JSON (schema in docs/senergy.md, "JSON schema") and CSV.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use crate::report::{JobReport, NodeEnergy};
use crate::scopes::{self, Scopes};
use crate::site::Tariff;
use crate::usage::{Usage, UsageRow};

/// A figure with at least `decimals` decimals and, below 1, enough for three significant
/// digits: a job's cost of 0.0000123 EUR must not read as 0.
pub fn amount(v: f64, decimals: usize) -> String {
    let needed = if v != 0.0 && v.is_finite() && v.abs() < 1.0 {
        (2.0 - v.abs().log10().floor()).clamp(0.0, 12.0) as usize
    } else {
        0
    };
    format!("{v:.*}", decimals.max(needed))
}

/// A report's form, as the command line asks for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Output {
    Table,
    Json,
    Csv,
    /// `senergy job --summary` ([`crate::summary`]).
    Summary,
}

mod columns;
mod csv_lines;
mod list;
pub use csv_lines::{jobs_csv, usage_csv};
pub use list::{DEFAULT_FORMAT, ListWriter, columns, list_cells};

/// Bumped when a field changes meaning or goes away (adding one does not).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct JobsJson<'a> {
    schema_version: u32,
    carbon_intensity: Option<String>,
    currency: &'a str,
    /// Which factors the figures used, and where they came from.
    factors: serde_json::Value,
    jobs: &'a [JobReport],
}

#[derive(Serialize)]
struct UsageJson<'a> {
    schema_version: u32,
    carbon_intensity: Option<String>,
    currency: &'a str,
    factors: serde_json::Value,
    #[serde(flatten)]
    usage: &'a Usage,
}

pub fn jobs_json(jobs: &[JobReport], tariff: &Tariff) -> String {
    let doc = JobsJson {
        schema_version: SCHEMA_VERSION,
        carbon_intensity: tariff.intensity_text(),
        currency: &tariff.currency,
        factors: factors_json(tariff),
        jobs,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

pub fn usage_json(usage: &Usage, tariff: &Tariff) -> String {
    let doc = UsageJson {
        schema_version: SCHEMA_VERSION,
        carbon_intensity: tariff.intensity_text(),
        currency: &tariff.currency,
        factors: factors_json(tariff),
        usage,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

fn factors_json(tariff: &Tariff) -> serde_json::Value {
    scopes::stamp_json(&tariff.stamp, tariff.factors(), &tariff.classes)
}

/// The factors in one line; empty where none is set.
pub(super) fn factors_text(tariff: &Tariff) -> String {
    scopes::stamp_text(&tariff.stamp, tariff.factors(), &tariff.classes).unwrap_or_default()
}

pub(super) fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

/// Whether `c` changes the direction of the text after it (the Unicode bidirectional
/// marks, embeddings, overrides and isolates).
fn reorders(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Text of a job's owner or the site (a job's or step's name, a user, an account, node
/// names, what measured a job) as the tables show it on a terminal: a control character
/// written as an escape (`\x1b`, `\n`, `\t`), never sent, as is a character that reorders
/// the text shown after it (a bidirectional override, `\u{202e}`); a backslash as `\\`, so
/// that an escape shown is never the name's own text. Sent as they are, an escape
/// sequence in a job's name would make the terminal of whoever reads the table move its
/// cursor, rewrite lines above (another job's figure) or set its title, and a newline
/// would forge a line of the table. CSV and JSON have rules of their own ([`columns::text`],
/// serde's escapes), and their readers want the text as it is.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c == '\\' || c.is_control() || reorders(c))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        let _ = match c {
            '\\' => write!(out, "\\\\"),
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            '\t' => write!(out, "\\t"),
            // C0, DEL and C1 (U+0080 to U+009F, CSI among them): all below U+0100
            c if c.is_control() => write!(out, "\\x{:02x}", u32::from(c)),
            c if reorders(c) => write!(out, "\\u{{{:x}}}", u32::from(c)),
            c => write!(out, "{c}"),
        };
    }
    Cow::Owned(out)
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

/// An average power whose bound ([`crate::report`]'s `avg_watts_bound_pct`) is above this
/// (percent) is shown as approximate: `~565.5`. Runs of 101 s or more are not.
const APPROXIMATE_PCT: f64 = 1.0;

/// An average power with one decimal, `~` before it where its bound is above
/// [`APPROXIMATE_PCT`]; empty where there is none.
fn average(watts: Option<f64>, bound_pct: Option<f64>) -> String {
    let mark = if bound_pct.is_some_and(|b| b > APPROXIMATE_PCT) {
        "~"
    } else {
        ""
    };
    watts.map(|w| format!("{mark}{w:.1}")).unwrap_or_default()
}

fn joules(j: Option<u64>) -> String {
    j.map(|j| format!("{j} J")).unwrap_or_else(|| "-".into())
}

fn node_text(n: &Option<NodeEnergy>) -> String {
    match n {
        Some(n) => format!("{} {}", shown(&n.name), joules(n.energy_j)),
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
                format!("({})", shown(&j.name))
            },
            shown(&j.user),
            shown(&j.account),
            j.state,
            if j.running { ", figures so far" } else { "" }
        );
        let _ = writeln!(
            t,
            "  {when}  elapsed {}  {} node(s) {}",
            duration(j.elapsed_s),
            j.nodes,
            shown(&j.node_list)
        );
        match j.energy_j {
            Some(e) => {
                let _ = writeln!(
                    t,
                    "  energy {e} J = {:.6} kWh  average {}  per node {}  data {}",
                    e as f64 / crate::carbon::JOULES_PER_KWH,
                    j.avg_watts
                        .map(|_| format!("{} W", average(j.avg_watts, j.avg_watts_bound_pct)))
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
        if !j.source.is_empty() {
            let _ = writeln!(t, "  measured: {}; {}", shown(&j.source), shown(&j.method));
        }
        for line in crate::kept::text(&j.kept, j.nodes) {
            let _ = writeln!(t, "  {}", shown(&line));
        }
        let mut money = Vec::new();
        if let (Some(g), Some(how)) = (j.emissions_g, tariff.intensity_text()) {
            match j.emissions_method.filter(|_| tariff.varies()) {
                Some(method) => money.push(format!("emissions {g:.2} gCO2e ({how}; {method})")),
                None => money.push(format!("emissions {g:.2} gCO2e ({how})")),
            }
        }
        if let Some(c) = j.cost {
            money.push(
                format!("cost {} {}", amount(c, 4), tariff.currency)
                    .trim_end()
                    .to_string(),
            );
        }
        if !money.is_empty() {
            let _ = writeln!(t, "  {}", money.join("  "));
        }
        if tariff.has_scopes() {
            let _ = writeln!(t, "  by scope: {}", by_scope(&j.emissions, tariff));
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
                shown(&s.name),
                s.nodes,
                duration(s.elapsed_s),
                s.energy_j
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "-".into()),
                average(s.avg_watts, s.avg_watts_bound_pct),
                opt(s.max_watts),
                node_text(&s.min_node),
                node_text(&s.max_node),
                s.data.as_str()
            );
            if s.node_energy.len() > 1 {
                let each: Vec<String> = s
                    .node_energy
                    .iter()
                    .map(|n| format!("{} {}", shown(&n.name), joules(n.energy_j)))
                    .collect();
                let _ = writeln!(t, "  {:<19} per node: {}", "", each.join(", "));
            }
            if tariff.has_scopes() {
                let _ = writeln!(
                    t,
                    "  {:<19} by scope: {}",
                    "",
                    by_scope(&s.emissions, tariff)
                );
            }
        }
        t.push('\n');
    }
    if let Some(factors) = scopes::stamp_text(&tariff.stamp, tariff.factors(), &tariff.classes) {
        let _ = writeln!(t, "factors: {}", shown(&factors));
    }
    t
}

/// A run's emissions by scope in words: each figure whose factor is set (`-` where it is
/// unknown).
fn by_scope(e: &Scopes, tariff: &Tariff) -> String {
    let grams = |g: Option<f64>| {
        g.map(|g| format!("{g:.2} gCO2e"))
            .unwrap_or_else(|| "-".into())
    };
    let mut parts = Vec::new();
    if tariff.pue.is_set() {
        let kwh = e
            .facility_energy_j
            .map(|j| format!("{:.6} kWh", j / crate::carbon::JOULES_PER_KWH))
            .unwrap_or_else(|| "-".into());
        parts.push(format!("facility {kwh}"));
    }
    if tariff.location.is_set() {
        parts.push(format!("scope 2 location {}", grams(e.scope2_location_g)));
    }
    if tariff.market.is_set() {
        parts.push(format!("scope 2 market {}", grams(e.scope2_market_g)));
    }
    if !tariff.classes.is_empty() {
        let class = e
            .node_class
            .as_ref()
            .map(|c| format!(", {}", shown(c)))
            .unwrap_or_default();
        parts.push(format!(
            "scope 3 embodied {} ({} node-h{class})",
            grams(e.scope3_embodied_g),
            fixed(e.node_hours, 4)
        ));
    }
    parts.join("  ")
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
            shown(account),
            shown(user),
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
    tampered_table(&mut t, usage);
    idle_held_table(&mut t, usage);
    if tariff.has_scopes() {
        let _ = writeln!(t, "\nBy scope:");
        for r in &usage.rows {
            let _ = writeln!(
                t,
                "{:<16} {:<16} {}",
                shown(&r.account),
                shown(&r.user),
                by_scope(&r.emissions, tariff)
            );
        }
        let _ = writeln!(
            t,
            "{:<16} {:<16} {}",
            "TOTAL",
            "",
            by_scope(&usage.total.emissions, tariff)
        );
    }
    if let Some(factors) = scopes::stamp_text(&tariff.stamp, tariff.factors(), &tariff.classes) {
        let _ = writeln!(t, "factors: {}", shown(&factors));
    }
    t
}

/// The rows with jobs whose energy in accounting was changed after they ended, each job
/// billed what its nodes kept; nothing where there is none.
fn tampered_table(t: &mut String, usage: &Usage) {
    if usage.total.jobs_tampered == 0 {
        return;
    }
    let _ = writeln!(
        t,
        "\nWARNING: accounting's energy of {} job(s) was changed after they ended; each is \
         billed above at what its nodes kept:",
        usage.total.jobs_tampered
    );
    let rows = usage.rows.iter().filter(|r| r.jobs_tampered > 0);
    for (r, account, user) in rows
        .map(|r| (r, shown(&r.account), shown(&r.user)))
        .chain([(&usage.total, Cow::from("TOTAL"), Cow::from(""))])
    {
        let _ = writeln!(
            t,
            "{account:<16} {user:<16} {} job(s) changed, accounting says {} J",
            r.jobs_tampered, r.tampered_accounting_j
        );
    }
}

/// Each row's idle-held energy (what its jobs held and did not use, as their nodes kept
/// it) and its share of the period's; "not recorded" where none of its jobs kept one.
fn idle_held_table(t: &mut String, usage: &Usage) {
    let _ = writeln!(t, "\nIdle-held (kept with the jobs):");
    let mut line = |r: &UsageRow, account: &str, user: &str| {
        let figures = match r.jobs_idle_held_recorded {
            0 => "not recorded".to_string(),
            recorded => {
                let each: Vec<String> = r
                    .idle_held_j
                    .iter()
                    .map(|(kind, j)| format!("{kind} {j:.0} J"))
                    .collect();
                format!(
                    "{}  share {}%  ({recorded} of {} jobs recorded)",
                    each.join(", "),
                    fixed(r.idle_held_share_pct, 1),
                    r.jobs
                )
            }
        };
        let _ = writeln!(t, "{:<16} {:<16} {figures}", shown(account), shown(user));
    };
    for r in &usage.rows {
        line(r, &r.account, &r.user);
    }
    line(&usage.total, "TOTAL", "");
}

#[cfg(test)]
mod tests;
